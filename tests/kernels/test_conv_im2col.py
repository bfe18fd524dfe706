"""Family `gemm`, kloop `im2col` (kernels/conv_im2col.py): forward and weight-gradient convolutions as an im2col
copy plus a GEMM, backward data as a GEMM plus a col2im gather (align 8: tma_persistent; align 1: tiled), on the
interpreter vs the float64 reference; validity, problem match, refusals, sm_90 builds."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import tiledispatch as td
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.kernels.family import config_errors as conv_config_errors
from tiledispatch.kernels.family import problem_mismatch as conv_problem_mismatch
from tiledispatch.kernels import conv_im2col
from tiledispatch.testing.reference import run_and_validate


def _cfg(ndim: int, split: int = 1, direction: str = "bwd_weight", align: int = 8, **epilogue) -> ConvConfig:
    # 16x32x16 GEMM tiles: tiny problems still leave partial row, column and reduction tiles
    return ConvConfig(family="gemm", direction=direction, ndim=ndim, dtype="fp16", block_m=16, block_n=32,
                      block_k=16, num_warps=4, num_stages=2, split_k=split, kloop="im2col", align=align,
                      **epilogue)


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
    ("fwd-2d-split2-bias", _cfg(2, split=2, direction="fwd", activation="relu", bias=True),
     _problem(2, 32, 48, (5, 6), (3, 3), "fwd", padding=1, bias=True, activation="relu"),
     "the GEMM's reduction (288 columns) in 2 splits: the split reduce runs the bias + relu epilogue"),
    ("fwd-1d-dil2", _cfg(1, direction="fwd"), _problem(3, 16, 16, (13,), (3,), "fwd", dilation=2, padding=2),
     "dilation 2 in 1-D"),
    ("fwd-3d", _cfg(3, direction="fwd"), _problem(1, 16, 32, (3, 4, 5), (3, 1, 3), "fwd", stride=(1, 2, 1),
                                                  padding=1),
     "3-D with a per-dim stride and a 1-wide filter dim"),
    ("fwd-3d-1x1-reads-x", _cfg(3, direction="fwd"), _problem(2, 32, 16, (2, 3, 5), (1, 1, 1), "fwd"),
     "1x1 at stride 1 forward: the GEMM reads x's pixel rows"),
    # backward data: dcols = dy @ w, then every dx element gathers the taps that reach it
    ("dgrad-2d-s2-asym", _cfg(2, direction="bwd_data"),
     _problem(2, 16, 32, (5, 7), (3, 3), "bwd_data", stride=2, padding=((1, 0), (2, 1))),
     "stride 2 with one-sided padding: each dx pixel meets 1, 2 or 4 taps by its parity, border pixels fewer"),
    ("dgrad-2d-dil2-c80", _cfg(2, direction="bwd_data"),
     _problem(1, 80, 16, (6, 5), (3, 3), "bwd_data", padding=2, dilation=2),
     "dilation 2; C=80: a partial 64-channel gather tile; 30 dx pixels (a partial 64-pixel block)"),
    ("dgrad-3d", _cfg(3, direction="bwd_data"),
     _problem(1, 16, 32, (3, 4, 5), (3, 1, 3), "bwd_data", stride=(1, 2, 1), padding=1),
     "3-D, stride 2 along the 1-wide filter dim: dx rows 0 and 2 meet no tap and are written as zeros"),
    ("dgrad-1d-s3", _cfg(1, direction="bwd_data"), _problem(3, 16, 16, (14,), (5,), "bwd_data", stride=3,
                                                            padding=((1, 3),)),
     "1-D stride 3 under a 5-tap filter with padding (1, 3): one or two taps per dx pixel by its residue"),
    ("dgrad-2d-split2", _cfg(2, split=2, direction="bwd_data"),
     _problem(1, 16, 64, (6, 7), (3, 3), "bwd_data", stride=2, padding=1),
     "dcols' reduction over 64 output channels in 2 splits, then the stride-2 gather"),
    ("dgrad-a1-split2", _cfg(2, split=2, direction="bwd_data", align=1),
     _problem(2, 3, 32, (9, 11), (5, 5), "bwd_data", stride=2, padding=2),
     "align 1 transposed dcols from a 2-split GEMM (the reduce writes rows of the padded pixel stride)"),
    ("dgrad-2d-1x1-writes-dx", _cfg(2, direction="bwd_data"), _problem(2, 32, 16, (5, 7), (1, 1), "bwd_data"),
     "1x1 at stride 1: the GEMM writes dx's pixel rows (no workspace, no gather)"),
    ("dgrad-2d-1x1-s2", _cfg(2, direction="bwd_data"),
     _problem(2, 32, 16, (5, 7), (1, 1), "bwd_data", stride=2),
     "a strided 1x1: dx pixels at odd coordinates get zeros"),
    # align 1: any channel count (pointer GEMM, 4-channel runs)
    ("fwd-a1-stem", _cfg(2, direction="fwd", align=1),
     _problem(2, 3, 16, (11, 13), (7, 7), "fwd", stride=2, padding=3),
     "a 3-channel 7x7 stride-2 stem: 147 columns, rows of 6-byte runs, nothing 16-byte aligned"),
    ("dgrad-a1-stem", _cfg(2, direction="bwd_data", align=1),
     _problem(2, 3, 16, (11, 13), (7, 7), "bwd_data", stride=2, padding=3),
     "the stem's data gradient: 3 of 4 gather channels, 147 dcols columns (a partial 32-wide GEMM tile)"),
    ("fwd-a1-c5-bias", _cfg(2, direction="fwd", align=1, activation="relu", bias=True),
     _problem(1, 5, 8, (6, 9), (3, 3), "fwd", padding=1, bias=True, activation="relu"),
     "C=5: 45 columns in rows of 48 (a 4-channel run and a 1-channel tail per tap), bias + relu"),
    ("wgrad-a1-stem", _cfg(2, split=4, align=1),
     _problem(2, 3, 16, (11, 13), (7, 7), stride=2, padding=3),
     "the stem's weight gradient: dw's rows of 147 elements written by the reduce of 4 splits over 84 pixels"),
    ("wgrad-a1-3d-c5", _cfg(3, split=2, align=1),
     _problem(1, 5, 8, (3, 5, 4), (3, 3, 3), stride=(1, 2, 1), padding=1),
     "3-D, C=5 (135 columns in rows of 136), 2 splits"),
    ("dgrad-a1-dil2", _cfg(2, direction="bwd_data", align=1),
     _problem(2, 5, 8, (7, 9), (3, 3), "bwd_data", dilation=2, padding=((2, 1), (1, 2))),
     "align 1 at stride 1 (one phase, every tap in it) with dilation 2 and one-sided padding; C=5"),
    ("dgrad-a1-3d", _cfg(3, direction="bwd_data", align=1),
     _problem(1, 6, 16, (3, 5, 4), (3, 3, 3), "bwd_data", stride=2, padding=1),
     "3-D align 1, stride 2 in every dim (8 parities)"),
]


def _first_candidates() -> list[ConvConfig]:
    """The first bf16 candidate of each align, per ndim and direction."""
    out = []
    for ndim in (1, 2, 3):
        for direction in conv_im2col.DIRECTIONS:
            first = {}
            for cfg in conv_im2col.candidate_configs("bf16", ndim, direction):
                first.setdefault(cfg.align, cfg)
            out.extend(first.values())
    return out


def prebuild_registries(items, load_script):
    """(tests/conftest.py) The instances of `registry` and of the sm_90 compile test, when selected."""
    out = [[case[1] for case in CASES]] if any("registry" in item.fixturenames for item in items) else []
    if any(item.name == "test_candidates_compile_for_sm90" for item in items):
        out.append(_first_candidates())
    return out


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
    block_p = dict(conv_im2col.TILES[8])["BLOCK_P"]
    assert plan.grids[0] == (-(-pixels // block_p) * 9, 1, 1)   # pixel blocks x 9 taps x one channel tile
    assert plan.workspaces[0] == ("b_ptr", pixels * 9 * 16, "fp16")
    # the split GEMM in one launch: fp32 partial slots and a counter per tile (its last unit runs the epilogue)
    assert len(plan.grids) == 2 and plan.workspaces[1][2] == "fp32" and plan.counters[0][0] == "count_ptr"


def test_backward_data_plan_is_the_gemm_then_the_gather():
    problem = _problem(2, 16, 32, (5, 7), (3, 3), "bwd_data", stride=2, padding=1)
    plan = conv_im2col.launch_plan(_cfg(2, direction="bwd_data"), problem, sms=132)
    block_p = dict(conv_im2col.GATHER_TILES[8])["BLOCK_P"]
    assert plan.grids[-1] == (-(-2 * 5 * 7 // block_p), 1, 1)   # dx pixel blocks x one channel tile
    assert plan.workspaces == (("out_ptr", 2 * 3 * 4 * 9 * 16, "fp16"),)   # dcols: output pixels x taps x C
    direct = conv_im2col.launch_plan(_cfg(2, direction="bwd_data"), _problem(2, 16, 32, (5, 7), (1, 1), "bwd_data"),
                                     sms=132)
    assert direct.grids[-1] == (0, 1, 1) and direct.workspaces == ()   # the GEMM writes dx, no gather
    # align 1: the weight repack first, dcols transposed (taps*C rows of the output pixels rounded up to 8)
    stem = _problem(2, 3, 16, (11, 13), (7, 7), "bwd_data", stride=2, padding=3)
    plan = conv_im2col.launch_plan(_cfg(2, direction="bwd_data", align=1), stem, sms=132)
    assert plan.workspaces[0] == ("out_ptr", 147 * 88, "fp16")   # 2 x 6 x 7 = 84 output pixels -> rows of 88
    assert plan.workspaces[1] == ("a_ptr", 16 * 152, "fp16")     # the GEMM's A: 16 x 147 weights in rows of 152
    # a grid layer per stride phase, the largest phase's dx pixel blocks (2 x 6 x 7) x 3 channels
    assert plan.grids[-1] == (-(-2 * 6 * 7 // 512) * 3, 1, 4)


def test_one_by_one_reads_x_without_a_copy():
    problem = _problem(2, 32, 16, (5, 7), (1, 1))
    plan = conv_im2col.launch_plan(_cfg(2), problem, sms=132)
    assert plan.grids[0] == (0, 1, 1) and plan.workspaces == ()   # the copy is not launched
    strided = conv_im2col.launch_plan(_cfg(2), _problem(2, 32, 16, (5, 7), (1, 1), stride=2), sms=132)
    assert strided.grids[0][0] > 0 and strided.workspaces[0][0] == "b_ptr"


def test_validity_names_the_field():
    arch = td.get_arch("sm_90")
    base = _cfg(2)
    assert "split_k" in dict(conv_config_errors(dataclasses.replace(base, direction="fwd", split_k=3), arch))
    assert not conv_config_errors(dataclasses.replace(base, direction="bwd_data", split_k=4), arch)
    assert "dtype" in dict(conv_config_errors(dataclasses.replace(base, dtype="fp32"), arch))
    assert "align" in dict(conv_config_errors(dataclasses.replace(base, align=4), arch))
    # bwd_weight at align 1 writes dw's unaligned rows through the split reduce only
    assert "split_k" in dict(conv_config_errors(dataclasses.replace(base, align=1), arch))
    assert not conv_config_errors(dataclasses.replace(base, align=1, split_k=2), arch)
    assert not conv_config_errors(dataclasses.replace(base, direction="bwd_data", align=1), arch)
    assert "split_k" in dict(conv_config_errors(dataclasses.replace(base, split_k=0), arch))
    assert "kloop" in dict(conv_config_errors(dataclasses.replace(base, family="igemm"), arch))


def test_problem_mismatch_names_the_field():
    cfg = _cfg(2)
    grouped = td.ConvProblem("bwd_weight", 1, 32, 32, 2, (4, 4), (3, 3), dtype="fp16")
    assert conv_problem_mismatch(cfg, grouped).startswith("groups:")
    assert conv_problem_mismatch(cfg, _problem(1, 24, 32, (4, 4), (3, 3))).startswith("c:")
    # align 1 takes any channel count (the problem's own align is 1 there)
    assert conv_problem_mismatch(_cfg(2, direction="fwd", align=1), _problem(1, 3, 8, (4, 4), (3, 3), "fwd")) is None
    assert conv_problem_mismatch(_cfg(2, direction="fwd", align=1), _problem(1, 3, 5, (4, 4), (3, 3), "fwd")).startswith(
        "k:")   # the output channels are 16-byte GEMM rows
    assert conv_problem_mismatch(_cfg(2, direction="fwd", align=1), _problem(1, 8, 8, (4, 4), (1, 1), "fwd")).startswith(
        "filter:")   # a stride-1 1x1 needs no copy: align 8 only
    huge = _problem(64, 512, 64, (224, 224), (7, 7), padding=3)   # 3.2M pixels x 25088 columns
    assert conv_problem_mismatch(cfg, huge).startswith("spatial:")
    # 4 fp32 partials of a 262144 x 1024 forward GEMM output: 2^30 elements (the cols workspace itself is small)
    wide = _problem(64, 16, 1024, (128, 128), (1, 1), "fwd", stride=2)
    assert conv_problem_mismatch(_cfg(2, split=4, direction="fwd"), wide).startswith("split_k:")
    assert conv_problem_mismatch(_cfg(2, split=1, direction="fwd"), wide) is None
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
    assert info.value.field == "w"


@pytest.mark.slow
def test_candidates_compile_for_sm90(build_registry):
    build_registry(_first_candidates())   # asserts that every instance compiled
