"""Family `gemm`: 1x1 convolutions as a GEMM over the pixels, on the interpreter, vs the float64 reference."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import tiledispatch as td
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.kernels.family import config_errors as conv_config_errors
from tiledispatch.kernels.family import problem_mismatch as conv_problem_mismatch
from tiledispatch.kernels.conv_gemm import entries, gemm_config
from tiledispatch.testing.reference import run_and_validate

# align 8 runs the tma_persistent GEMM, align 1 the pointer-loading tiled GEMM
CONFIGS = {(d, a): ConvConfig(family="gemm", direction=d, ndim=2, dtype="fp16", block_m=64, block_n=64, block_k=32,
                              num_stages=3, align=a) for d in ("fwd", "bwd_data") for a in (1, 8)}
EPILOGUE = ConvConfig(family="gemm", direction="fwd", ndim=2, dtype="fp16", block_m=64, block_n=64, block_k=32,
                      num_stages=3, align=8, activation="silu", bias=True)


@pytest.fixture(scope="module")
def registry(build_registry):
    return build_registry([*CONFIGS.values(), EPILOGUE])


# (n, c, k, spatial): 24/40 channels are multiples of 8 but not of the 64-wide tiles; 5x7 pixels leave a
# partial row tile; 1-D and 3-D shapes check that the pixel flattening holds for every ndim.
SHAPES = [(2, 24, 40, (5, 7)), (1, 8, 72, (3, 3)), (3, 16, 8, (11,)), (1, 16, 24, (2, 3, 5))]


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
@pytest.mark.parametrize("align", [1, 8])
@pytest.mark.parametrize("n, c, k, spatial", SHAPES)
def test_one_by_one_matches_reference(registry, build_registry, direction, align, n, c, k, spatial):
    ndim = len(spatial)
    cfg = CONFIGS[(direction, align)]
    cfg = dataclasses.replace(cfg, ndim=ndim)
    reg = registry if ndim == 2 else build_registry([cfg])
    problem = td.ConvProblem(direction, n, c, k, 1, spatial, (1,) * ndim, dtype="fp16", align=align)
    _, _, result = run_and_validate(reg.get(cfg.name), problem)
    assert result["passed"], result


# split_k=1 at align 8: the tiled GEMM (16-byte vector loads) instead of tma_persistent; 48 -> 32 channels over
# 5 x 7 pixels (partial row tile, a reduction of 48 = 1.5 K blocks), and the fused bias + silu epilogue
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_one_by_one_on_the_tiled_gemm_matches_reference(build_registry, direction):
    cfg = dataclasses.replace(CONFIGS[(direction, 8)], split_k=1, activation="silu" if direction == "fwd" else "none",
                              bias=direction == "fwd")
    assert gemm_config(cfg).family == "tiled" and gemm_config(cfg).align == 16
    problem = td.ConvProblem(direction, 2, 48, 32, 1, (5, 7), (1, 1), dtype="fp16", bias=cfg.bias,
                             activation=cfg.activation)
    assert run_and_validate(build_registry([cfg]).get(cfg.name), problem)[2]["passed"]
    assert "split_k" in dict(conv_config_errors(dataclasses.replace(CONFIGS[(direction, 1)], split_k=1),
                                                td.get_arch("sm_90")))   # align 1 runs tiled at split_k=0


def test_bias_and_activation_are_fused(registry):
    problem = td.ConvProblem("fwd", 2, 16, 24, 1, (3, 5), (1, 1), dtype="fp16", bias=True, activation="silu")
    assert run_and_validate(registry.get(EPILOGUE.name), problem)[2]["passed"]


def test_unaligned_channels_need_the_align1_instance(registry):
    problem = td.ConvProblem("fwd", 1, 12, 20, 1, (4, 4), (1, 1), dtype="fp16")   # C=12: not a multiple of 8
    assert problem.align == 4   # below the align-8 instance
    assert not registry.get(CONFIGS[("fwd", 8)].name).is_supported(problem)
    assert run_and_validate(registry.get(CONFIGS[("fwd", 1)].name), problem)[2]["passed"]


# align 2: the tiled GEMM with rows of 2 elements (4-byte vectors), every direction; 54 -> 24 and 24 -> 54 channels
# (x3d-like pointwise layers: multiples of 2, not of 8) over 5 x 7 pixels (partial row tiles), and 6 -> 10 in 3-D
A2_SHAPES = [(2, 54, 24, (5, 7)), (2, 24, 54, (5, 7)), (1, 6, 10, (2, 3, 5))]


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
@pytest.mark.parametrize("n, c, k, spatial", A2_SHAPES)
def test_align2_gemm_matches_reference(build_registry, direction, n, c, k, spatial):
    ndim = len(spatial)
    cfg = ConvConfig(family="gemm", direction=direction, ndim=ndim, dtype="fp16", block_m=32, block_n=32,
                     block_k=32, num_stages=2, split_k=4 if direction == "bwd_weight" else 0, align=2)
    assert gemm_config(cfg).align == 4 and gemm_config(cfg).family in ("tiled", "splitk")
    problem = td.ConvProblem(direction, n, c, k, 1, spatial, (1,) * ndim, dtype="fp16")
    assert problem.align == 2
    _, _, result = run_and_validate(build_registry([cfg]).get(cfg.name), problem)
    assert result["passed"], result
    odd = td.ConvProblem(direction, n, c + 1, k, 1, spatial, (1,) * ndim, dtype="fp16")   # odd C: align 1
    assert conv_problem_mismatch(cfg, odd).startswith("align")


def test_pixels_with_gaps_raise_bad_input(registry):
    """A channels-last view with a gap between rows is not a matrix: refused by field, never copied."""
    problem = td.ConvProblem("fwd", 1, 8, 8, 1, (4, 4), (1, 1), dtype="fp16", align=1)
    big = torch.randn(1, 8, 4, 6, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    x = big[:, :, :, :4]
    w = torch.randn(8, 8, 1, 1, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    with pytest.raises(td.BadInput) as info:
        registry.get(CONFIGS[("fwd", 1)].name).run(problem, x=x, w=w)
    assert info.value.field == "input"


# bwd_weight: dw = dy^T x on the split-K GEMM family (4 splits; the tiny problems leave some splits empty,
# whose zero partials must still be summed). align 8 needs channel totals that are multiples of 16.
WGRAD = {a: ConvConfig(family="gemm", direction="bwd_weight", ndim=2, dtype="fp16", block_m=32, block_n=32,
                       block_k=32, num_stages=2, split_k=4, align=a) for a in (1, 8)}
# (n, c, k, spatial, align): 32/48 channels with a partial 32-wide tile; odd channels (align 1); 1-D and 3-D
WGRAD_SHAPES = [(2, 32, 48, (5, 7), 8), (3, 5, 7, (5, 7), 1), (2, 16, 16, (9,), 8), (1, 5, 10, (3, 4, 5), 1)]


@pytest.mark.parametrize("n, c, k, spatial, align", WGRAD_SHAPES)
def test_one_by_one_bwd_weight_matches_reference(build_registry, n, c, k, spatial, align):
    ndim = len(spatial)
    cfg = dataclasses.replace(WGRAD[align], ndim=ndim)
    problem = td.ConvProblem("bwd_weight", n, c, k, 1, spatial, (1,) * ndim, dtype="fp16")
    assert problem.align == align
    _, _, result = run_and_validate(build_registry([cfg]).get(cfg.name), problem)
    assert result["passed"], result


# split_k=128: more splits than the reduce unrolls; runs of 16 partial slots are folded first (kernels/
# gemm_splitk.FOLD). 5 -> 7 channels over 2 x 40 x 41 pixels (3,280: 26 pixels per split rounded up to one
# 32-pixel block, so splits 0..102 hold pixels, the last one partly, and 103..127 hold zeros that are summed too)
def test_one_by_one_bwd_weight_folded_splits_match_reference(build_registry):
    cfg = dataclasses.replace(WGRAD[1], split_k=128)
    assert len(entries(cfg)) == 3
    problem = td.ConvProblem("bwd_weight", 2, 5, 7, 1, (40, 41), (1, 1), dtype="fp16")
    _, _, result = run_and_validate(build_registry([cfg]).get(cfg.name), problem)
    assert result["passed"], result


# split_k=1: the unsplit tiled GEMM (no workspace, one program per dw tile); 48 x 32 channels over 2 x 5 x 7
# pixels (a partial 32-row tile, a reduction that is no multiple of block_k); odd channels at align 1
@pytest.mark.parametrize("n, c, k, spatial, align", [(2, 32, 48, (5, 7), 8), (3, 5, 7, (5, 7), 1)])
def test_one_by_one_bwd_weight_unsplit_matches_reference(build_registry, n, c, k, spatial, align):
    cfg = dataclasses.replace(WGRAD[align], split_k=1)
    assert gemm_config(cfg).family == "tiled" and len(entries(cfg)) == 1
    problem = td.ConvProblem("bwd_weight", n, c, k, 1, spatial, (1, 1), dtype="fp16")
    _, _, result = run_and_validate(build_registry([cfg]).get(cfg.name), problem)
    assert result["passed"], result


def test_bwd_weight_gemm_refusals(build_registry):
    arch = td.get_arch("sm_90")
    assert "split_k" in dict(conv_config_errors(dataclasses.replace(WGRAD[8], split_k=0), arch))
    assert "split_k" in dict(conv_config_errors(dataclasses.replace(WGRAD[8], split_k=5), arch))
    # 24 channels: align 8, but the aligned GEMM wants multiples of 16
    reason = conv_problem_mismatch(WGRAD[8], td.ConvProblem("bwd_weight", 1, 24, 32, 1, (4, 4), (1, 1),
                                                            dtype="fp16"))
    assert reason.startswith("c:")
    # 16 channels sliced from a 20-channel tensor: pixel stride 20, not the multiple of 8 fp16 elements (16 bytes)
    # that the aligned GEMM was compiled for, though the problem claims align 8: the tensors guarantee less
    problem = td.ConvProblem("bwd_weight", 1, 16, 16, 1, (4, 4), (1, 1), dtype="fp16", align=8)
    x = torch.randn(1, 20, 4, 4, dtype=torch.float16).contiguous(memory_format=torch.channels_last)[:, :16]
    dy = torch.randn(1, 16, 4, 4, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    with pytest.raises(td.UnsupportedProblem) as info:
        build_registry([WGRAD[8]]).get(WGRAD[8].name).run(problem, x=x, y=dy)
    assert info.value.field == "align"
