"""Family `gemm`, kloop `im2col` (kernels/conv_im2col.py): forward and weight-gradient convolutions as an im2col
copy plus the tma_persistent GEMM, on the interpreter vs the float64 reference; validity, problem match, refusals,
sm_90 builds."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import tiledispatch as td
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.conv_validity import conv_config_errors, conv_problem_mismatch
from tiledispatch.kernels import conv_im2col
from tiledispatch.runtime.conv_reference import run_and_validate


def _cfg(ndim: int, split: int = 1, direction: str = "bwd_weight", **epilogue) -> ConvConfig:
    # 16x32x16 GEMM tiles: tiny problems still leave partial row, column and reduction tiles
    return ConvConfig(family="gemm", direction=direction, ndim=ndim, dtype="fp16", block_m=16, block_n=32,
                      block_k=16, num_warps=4, num_stages=2, split_k=split, kloop="im2col", align=8, **epilogue)


def _problem(n: int, c: int, k: int, spatial, filt, direction: str = "bwd_weight", **kw) -> td.ConvProblem:
    return td.ConvProblem(direction, n, c, k, 1, tuple(spatial), tuple(filt), dtype="fp16", **kw)


# (id, config, problem, why)
CASES = [
    ("2d-s2-asym", _cfg(2), _problem(2, 16, 32, (5, 7), (3, 3), stride=2, padding=((1, 0), (2, 1))),
     "stride 2 and one-sided padding: taps reading past every border are zero columns"),
    ("2d-split4-c80", _cfg(2, split=4), _problem(1, 80, 16, (6, 5), (3, 3), padding=1),
     "C=80: a partial 64-channel im2col tile per tap; 30 pixels (two 16-pixel chunks) in 4 splits, two of them "
     "empty (their zero partials are summed too)"),
    ("1d-dil2", _cfg(1), _problem(3, 16, 16, (13,), (3,), dilation=2, padding=2),
     "dilation 2 in 1-D; 39 pixels: a partial 64-pixel im2col block"),
    ("3d-split2", _cfg(3, split=2), _problem(1, 16, 48, (3, 4, 5), (3, 1, 3), stride=(1, 2, 1), padding=1),
     "3-D with a per-dim stride and a 1-wide filter dim, 2 splits"),
    ("2d-1x1-s2", _cfg(2), _problem(2, 32, 16, (7, 7), (1, 1), stride=2),
     "a strided 1x1 (no 1x1 GEMM can take it: the pixels it reads are not evenly spaced)"),
    ("3d-1x1-reads-x", _cfg(3, split=2), _problem(2, 32, 16, (2, 3, 5), (1, 1, 1)),
     "1x1 at stride 1: the GEMM reads x itself (no copy, no cols workspace), 60 pixels in 2 splits"),
    # forward: y = cols @ w^T with the GEMM's epilogue
    ("fwd-2d-s2-asym", _cfg(2, direction="fwd"), _problem(2, 16, 48, (5, 7), (3, 3), "fwd", stride=2,
                                                          padding=((1, 0), (2, 1))),
     "stride 2 and one-sided padding; K=48 leaves a partial 32-wide column tile"),
    ("fwd-2d-bias-silu", _cfg(2, direction="fwd", activation="silu", bias=True),
     _problem(1, 80, 16, (6, 5), (3, 3), "fwd", padding=1, bias=True, activation="silu"),
     "the fused bias + activation epilogue; C=80 (a partial 64-channel copy tile); 30 pixels"),
    ("fwd-1d-dil2", _cfg(1, direction="fwd"), _problem(3, 16, 16, (13,), (3,), "fwd", dilation=2, padding=2),
     "dilation 2 in 1-D"),
    ("fwd-3d", _cfg(3, direction="fwd"), _problem(1, 16, 32, (3, 4, 5), (3, 1, 3), "fwd", stride=(1, 2, 1),
                                                  padding=1),
     "3-D with a per-dim stride and a 1-wide filter dim"),
    ("fwd-3d-1x1-reads-x", _cfg(3, direction="fwd"), _problem(2, 32, 16, (2, 3, 5), (1, 1, 1), "fwd"),
     "1x1 at stride 1 forward: the GEMM reads x's pixel rows"),
]


@pytest.fixture(scope="module")
def registry(build_registry):
    return build_registry(list({c[1].name: c[1] for c in CASES}.values()))


@pytest.mark.parametrize("cfg, problem", [pytest.param(c[1], c[2], id=c[0]) for c in CASES])
def test_matches_reference(registry, cfg, problem):
    assert conv_problem_mismatch(cfg, problem) is None
    _, _, result = run_and_validate(registry.get(cfg.name), problem)
    assert result["passed"], result


def test_plan_has_the_copy_then_the_gemm():
    problem = _problem(2, 16, 32, (5, 7), (3, 3), padding=1)
    plan = conv_im2col.launch_plan(_cfg(2, split=2), problem, sms=132)
    pixels = 2 * 5 * 7
    assert plan.grids[0] == (-(-pixels // conv_im2col.BLOCK_P), 9, 1)   # 9 taps x one channel tile
    assert plan.workspaces[0] == ("b_ptr", pixels * 9 * 16, "fp16")
    assert len(plan.grids) == 3 and plan.workspaces[1][2] == "fp32"     # GEMM + its split reduce, fp32 partials


def test_one_by_one_reads_x_without_a_copy():
    problem = _problem(2, 32, 16, (5, 7), (1, 1))
    plan = conv_im2col.launch_plan(_cfg(2), problem, sms=132)
    assert plan.grids[0] == (0, 1, 1) and plan.workspaces == ()   # the copy is not launched
    strided = conv_im2col.launch_plan(_cfg(2), _problem(2, 32, 16, (5, 7), (1, 1), stride=2), sms=132)
    assert strided.grids[0][0] > 0 and strided.workspaces[0][0] == "b_ptr"


def test_validity_names_the_field():
    arch = td.get_arch("sm_90")
    base = _cfg(2)
    assert "direction" in dict(conv_config_errors(dataclasses.replace(base, direction="bwd_data"), arch))
    assert "split_k" in dict(conv_config_errors(dataclasses.replace(base, direction="fwd", split_k=2), arch))
    assert "dtype" in dict(conv_config_errors(dataclasses.replace(base, dtype="fp32"), arch))
    assert "align" in dict(conv_config_errors(dataclasses.replace(base, align=1), arch))
    assert "split_k" in dict(conv_config_errors(dataclasses.replace(base, split_k=0), arch))
    assert "kloop" in dict(conv_config_errors(dataclasses.replace(base, family="igemm"), arch))


def test_problem_mismatch_names_the_field():
    cfg = _cfg(2)
    grouped = td.ConvProblem("bwd_weight", 1, 32, 32, 2, (4, 4), (3, 3), dtype="fp16")
    assert conv_problem_mismatch(cfg, grouped).startswith("groups:")
    assert conv_problem_mismatch(cfg, _problem(1, 24, 32, (4, 4), (3, 3))).startswith("c:")
    huge = _problem(64, 512, 64, (224, 224), (7, 7), padding=3)   # 3.2M pixels x 25088 columns
    assert conv_problem_mismatch(cfg, huge).startswith("spatial:")
    # a stride-1 1x1 has no workspace (the GEMM reads x), so only the int32 pixel bound refuses 2^32 pixels, in
    # both directions (forward's GEMM reduces over channels, not pixels)
    for direction in conv_im2col.DIRECTIONS:
        many = _problem(2**16, 16, 16, (256, 256), (1, 1), direction)
        assert conv_problem_mismatch(_cfg(2, direction=direction), many).startswith("spatial:"), direction


def test_weight_with_gaps_raises_bad_input(registry):
    problem = _problem(1, 16, 32, (4, 4), (3, 3), padding=1)
    x = torch.randn(1, 16, 4, 4, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    dy = torch.randn(1, 32, 4, 4, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    w = torch.empty(32, 16, 3, 3, dtype=torch.float16)   # contiguous (K, C, Y, X): taps are not channel-major
    with pytest.raises(td.BadInput) as info:
        registry.get(CASES[0][1].name).run(problem, x=x, y=dy, w=w)
    assert info.value.field == "weight"


def test_candidates_compile_for_sm90(build_registry):
    reg = td.Registry("sm_90")
    for ndim in (1, 2, 3):
        for direction in conv_im2col.DIRECTIONS:
            for cfg in conv_im2col.candidate_configs("bf16", ndim, direction)[:2]:
                reg.add(cfg)
    report = reg.build()
    assert not report.failed, report.failed
