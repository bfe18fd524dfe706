"""Family `igemm`, direction bwd_weight (kernels/conv_wgrad.py): split-K implicit GEMM on the interpreter vs the
float64 reference, the split planning, the validity conditions, and an sm_90 build of the preset candidates."""
from __future__ import annotations

import dataclasses

import pytest

import tiledispatch as td
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.kernels.family import config_errors as conv_config_errors
from tiledispatch.kernels.family import problem_mismatch as conv_problem_mismatch
from tiledispatch.kernels import conv_wgrad
from tiledispatch.testing.reference import run_and_validate


def _cfg(ndim: int, kloop: str, gpp: int = 1, align: int = 8, split: int = 0, dtype: str = "fp16") -> ConvConfig:
    # 16x16x16 tiles: the smallest dot tiles, so tiny problems still have partial row/column/pixel tiles
    return ConvConfig(family="igemm", direction="bwd_weight", ndim=ndim, dtype=dtype, block_m=16, block_n=16,
                      block_k=16, groups_per_program=gpp, num_warps=4, num_stages=2, split_k=split, kloop=kloop,
                      align=align)


def _problem(ndim: int, n: int, c: int, k: int, groups: int, spatial, filt, dtype: str = "fp16", **kw):
    return td.ConvProblem("bwd_weight", n, c, k, groups, tuple(spatial), tuple(filt), dtype=dtype, **kw)


ASYM2 = ((1, 0), (2, 1))
# (id, config, problem, why)
CASES = [
    # dense, 'tap' columns, align 8, split chosen per problem (1 here: direct dw store)
    ("dense-1d-tap-a8", _cfg(1, "tap"), _problem(1, 3, 16, 24, 1, (11,), (3,), stride=2, padding=((2, 1),)),
     "stride 2, asymmetric padding, K=24 leaves a partial row tile"),
    ("dense-2d-tap-a8", _cfg(2, "tap"), _problem(2, 2, 24, 16, 1, (5, 7), (3, 3), stride=2, padding=ASYM2),
     "C=24: a partial channel tile per tap; odd spatial sizes"),
    ("dense-3d-tap-a8", _cfg(3, "tap"), _problem(3, 1, 8, 8, 1, (3, 4, 5), (2, 3, 3), padding=1, dilation=2),
     "dilation 2 in 3-D, taps reaching past every border"),
    # dense, 'flat' columns, align 1 with odd channel counts, 4 splits whose last pixel chunk is partial
    ("dense-1d-flat-a1-split", _cfg(1, "flat", align=1, split=4), _problem(1, 3, 5, 3, 1, (23,), (5,), padding=2),
     "69 pixels: 5 chunks, splits of 2+2+1 chunks, the last one partial; 25 columns over 2 tiles"),
    ("dense-2d-flat-a1-split", _cfg(2, "flat", align=1, split=4), _problem(2, 3, 3, 7, 1, (6, 9), (3, 3), padding=1),
     "162 pixels in 4 splits (3+3+3+2 chunks, last chunk 2 pixels); C=3, K=7"),
    ("dense-3d-flat-a8-split", _cfg(3, "flat", split=2), _problem(3, 2, 8, 16, 1, (3, 5, 4), (3, 3, 1),
                                                                  stride=(1, 2, 1), padding=((1, 1), (0, 2), (0, 0))),
     "per-dim stride and one-sided padding, 2 splits"),
    # grouped, 4 channels per group (align 1: C/G is not a multiple of 8)
    ("g4-2d-tap-gpp1", _cfg(2, "tap", align=1, split=2), _problem(2, 2, 16, 16, 4, (5, 6), (3, 3), padding=1),
     "one group per program, 'tap' columns wider than C/G"),
    ("g4-2d-flat-gpp2", _cfg(2, "flat", gpp=2, align=1), _problem(2, 2, 12, 12, 3, (5, 6), (3, 3), stride=2,
                                                                   padding=ASYM2),
     "G=3 is not a multiple of GPP=2: the last program masks a group"),
    ("g4-3d-flat-gpp4", _cfg(3, "flat", gpp=4, align=1, split=2), _problem(3, 1, 16, 16, 4, (3, 4, 4), (3, 3, 3),
                                                                          padding=1),
     "batched dot of 4 groups, 108 columns per group, 2 splits"),
    ("g4-1d-tap-gpp4", _cfg(1, "tap", gpp=4, align=1), _problem(1, 2, 32, 32, 8, (9,), (3,), dilation=2, padding=1),
     "batched dot with 'tap' columns, dilation 2"),
    # grouped, 16 channels per group (align 8)
    ("g16-2d-tap-gpp1", _cfg(2, "tap", split=4), _problem(2, 3, 32, 32, 2, (4, 7), (3, 3), padding=1),
     "aligned grouped loads, 4 splits"),
    ("g16-2d-flat-gpp2", _cfg(2, "flat", gpp=2), _problem(2, 2, 48, 24, 3, (5, 5), (3, 3), stride=2, padding=1),
     "C/G=16, K/G=8 (half a row tile); G=3 with GPP=2"),
    ("g16-3d-flat-gpp4", _cfg(3, "flat", gpp=4, split=2), _problem(3, 1, 64, 64, 4, (3, 3, 4), (3, 3, 3),
                                                                   padding=((1, 0), (1, 1), (0, 1))),
     "3-D grouped with asymmetric padding, 2 splits"),
    ("g16-1d-flat-gpp4", _cfg(1, "flat", gpp=4), _problem(1, 3, 128, 64, 8, (10,), (4,), stride=2, padding=1),
     "1-D, even filter, K/G=8 != C/G=16"),
    # block-diagonal ('diag'): one channel tile holds whole groups, cross-group pairs masked at the store
    ("diag-2d-g4-a1", _cfg(2, "diag", align=1, split=2), _problem(2, 2, 40, 40, 10, (5, 6), (3, 3), padding=1),
     "C/G=4: 4 groups per 16-channel tile, 10 groups leave a half tile; 2 splits"),
    ("diag-2d-g3-a1", _cfg(2, "diag", align=1), _problem(2, 2, 21, 21, 7, (6, 5), (3, 3), stride=2, padding=ASYM2),
     "C/G=3 does not divide the tile: 5 groups (15 lanes) per tile, lane 15 masked"),
    ("diag-3d-g2-a1", _cfg(3, "diag", align=1, split=4), _problem(3, 1, 12, 12, 6, (3, 4, 4), (3, 3, 3),
                                                                   padding=1, dilation=(1, 2, 1)),
     "3-D, C/G=2, dilation, 4 splits"),
    ("diag-1d-g8-a8", _cfg(1, "diag"), _problem(1, 3, 24, 24, 3, (13,), (5,), padding=2),
     "C/G=8 aligned: 2 groups per tile, the second tile half empty"),
    ("diag-2d-g16-a8", _cfg(2, "diag", split=2), _problem(2, 2, 32, 32, 2, (5, 5), (3, 3), stride=2, padding=1),
     "C/G == block_n: one group per tile (the dense case of the diag path)"),
    # block-diagonal over a filter row ('diagrow'): 3 unrolled taps per program, masked past the filter width
    ("diagrow-2d-g4-a1", _cfg(2, "diagrow", align=1, split=2), _problem(2, 2, 40, 40, 10, (5, 6), (3, 3),
                                                                        padding=1),
     "C/G=4, 10 groups leave a half tile; every tap of a row meets the left / right border; 2 splits"),
    ("diagrow-2d-g3-w2-a1", _cfg(2, "diagrow", align=1), _problem(2, 2, 21, 21, 7, (6, 5), (3, 2), stride=2,
                                                                  padding=ASYM2),
     "filter width 2 < 3 unrolled taps (the third masked at load and store); C/G=3 leaves lane 15 masked"),
    ("diagrow-3d-g2-a1", _cfg(3, "diagrow", align=1, split=4), _problem(3, 1, 12, 12, 6, (3, 4, 5), (2, 3, 3),
                                                                         padding=1, dilation=(1, 1, 2)),
     "3-D: two outer dims per filter row index, dilation along the unrolled dim, 4 splits"),
    ("diagrow-1d-g8-a8", _cfg(1, "diagrow"), _problem(1, 3, 24, 24, 3, (13,), (3,), stride=2, padding=((2, 0),)),
     "1-D: one filter row; C/G=8 aligned, the second tile half empty; one-sided padding"),
    ("diagrow-2d-g16-a8", _cfg(2, "diagrow", split=2), _problem(2, 2, 32, 32, 2, (5, 5), (1, 3), padding=(0, 1)),
     "C/G == block_n; filter height 1 (a single row per channel tile)"),
    # 'tap' over a filter row ('taprow'): 3 unrolled taps per program, one group per program
    ("taprow-2d-dense-a8", _cfg(2, "taprow", split=2), _problem(2, 2, 24, 16, 1, (5, 7), (3, 3), stride=2,
                                                                padding=ASYM2),
     "C=24: a partial channel tile per filter row; stride 2, asymmetric padding; 2 splits"),
    ("taprow-3d-g4-a1", _cfg(3, "taprow", align=1), _problem(3, 1, 16, 16, 4, (3, 4, 5), (3, 2, 2), padding=1,
                                                             dilation=(1, 1, 2)),
     "grouped C/G=4, filter width 2 (the third tap masked), dilation along the unrolled dim"),
    ("taprow-1d-a1-split", _cfg(1, "taprow", align=1, split=4), _problem(1, 3, 5, 3, 1, (23,), (3,), padding=2),
     "1-D: one filter row; odd channel counts; 4 splits"),
    # fp32 (ieee dot)
    ("fp32-2d-tap-split", _cfg(2, "tap", split=2, dtype="fp32"),
     _problem(2, 2, 24, 16, 1, (5, 7), (3, 3), dtype="fp32", stride=2, padding=ASYM2), "fp32 with 2 splits"),
    ("fp32-3d-flat-gpp2", _cfg(3, "flat", gpp=2, align=1, dtype="fp32"),
     _problem(3, 1, 8, 12, 4, (3, 3, 4), (2, 2, 3), dtype="fp32", padding=1, dilation=(1, 2, 1)),
     "fp32 batched dot, C/G=2, K/G=3"),
]


def _built_candidates() -> list[ConvConfig]:
    candidates = conv_wgrad.candidate_configs("bf16", 2)
    return [candidates[i] for i in BUILT_CANDIDATES]


def prebuild_registries(items, load_script):
    """(tests/conftest.py) The instances of `registry` and of the sm_90 compile test, when selected."""
    out = [[case[1] for case in CASES]] if any("registry" in item.fixturenames for item in items) else []
    if any(item.name == "test_candidates_compile_for_sm90" for item in items):
        out.append(_built_candidates())
    return out


@pytest.fixture(scope="module")
def registry(build_registry):
    return build_registry({case[1] for case in CASES})


@pytest.mark.parametrize("cfg, problem", [pytest.param(c[1], c[2], id=c[0]) for c in CASES])
def test_matches_reference(registry, cfg, problem):
    assert conv_problem_mismatch(cfg, problem) is None
    _, _, result = run_and_validate(registry.get(cfg.name), problem)
    assert result["passed"], result


def test_cases_cover_splits():
    """The split cases really run several splits, one of them with a partial last chunk."""
    splits = {c[0]: conv_wgrad.split_plan(c[1], c[2], 132) for c in CASES}
    assert splits["dense-2d-tap-a8"][0] == 1
    assert splits["dense-2d-flat-a1-split"] == (4, 3)
    assert splits["dense-1d-flat-a1-split"] == (3, 2)   # 5 chunks: no split is left empty
    assert sum(s > 1 for s, _ in splits.values()) >= 6


def test_auto_split_fills_waves():
    # the dense 3x3 layer of ResNet-50 stage 1: 36 tiles of 128x128 need splits to fill 2 waves of 132 SMs
    cfg = conv_wgrad.candidate_configs("bf16", 2)[0]
    p = td.ConvProblem("bwd_weight", 32, 256, 256, 1, (56, 56), (3, 3), padding=1)
    splits, cps = conv_wgrad.split_plan(cfg, p, 132)
    programs = 36 * splits
    assert programs >= 264 and -(-programs // 132) * 132 / programs <= 1.1
    assert (splits - 1) * cps < conv_wgrad.pixel_chunks(cfg, p) <= splits * cps
    plan = conv_wgrad.launch_plan(cfg, p, 132)
    assert plan.grids[0] == (36, splits, 1)
    assert plan.workspaces == (("ws_ptr", splits * 256 * 256 * 9, "fp32"),)
    # a tiny problem keeps >= 8 chunks per split: one split, no workspace, no reduce launch
    tiny = td.ConvProblem("bwd_weight", 1, 256, 256, 1, (8, 8), (3, 3), padding=1)
    plan = conv_wgrad.launch_plan(cfg, tiny, 132)
    assert plan.grids[1] == (0, 1, 1) and plan.workspaces[0][1] == 0


def test_problem_mismatch_names_the_field():
    cfg = _cfg(2, "flat", gpp=4)
    p = td.ConvProblem("bwd_weight", 1, 16, 16, 4, (4, 4), (3, 3), dtype="fp16", align=8)   # C/G = 4
    assert conv_problem_mismatch(cfg, p).startswith("align:")
    assert conv_problem_mismatch(_cfg(2, "flat", gpp=4, align=1), p) is None


def test_diag_validity_and_mismatch():
    arch = td.Registry("sm_90").arch
    square = _cfg(2, "diag", align=1)
    assert conv_config_errors(square, arch) == []
    wide = dataclasses.replace(square, block_n=32)
    assert [field for field, _ in conv_config_errors(wide, arch)] == ["block_m"]
    unequal = _problem(2, 2, 16, 32, 4, (5, 5), (3, 3), padding=1)
    assert conv_problem_mismatch(square, unequal).startswith("c_per_group")
    too_wide = _problem(2, 2, 64, 64, 2, (5, 5), (3, 3), padding=1)   # C/G = 32 > block_n = 16
    assert conv_problem_mismatch(square, too_wide).startswith("c_per_group")


def test_row_kloops_validity_and_mismatch():
    arch = td.Registry("sm_90").arch
    row = _cfg(2, "diagrow", align=1)
    assert conv_config_errors(row, arch) == []
    fwd = dataclasses.replace(row, direction="fwd", block_k=4)
    assert "kloop" in [field for field, _ in conv_config_errors(fwd, arch)]
    # three 64x64 accumulators on 2 warps: 192 values per thread
    crowded = dataclasses.replace(row, block_m=64, block_n=64, num_warps=2)
    assert "num_warps" in [field for field, _ in conv_config_errors(crowded, arch)]
    wide = _problem(2, 2, 16, 16, 4, (7, 7), (3, 5), padding=1)   # 5 taps per row > 3 unrolled
    assert conv_problem_mismatch(row, wide).startswith("filter")
    assert conv_problem_mismatch(_cfg(2, "diag", align=1), wide) is None
    assert conv_problem_mismatch(_cfg(2, "taprow", align=1), wide).startswith("filter")
    merged = dataclasses.replace(_cfg(2, "taprow", align=1), groups_per_program=2)
    assert "groups_per_program" in [field for field, _ in conv_config_errors(merged, arch)]


def test_row_kloops_grid_has_a_program_per_filter_row():
    cfg = _cfg(3, "diagrow", align=1, split=1)
    p = _problem(3, 1, 32, 32, 8, (4, 4, 4), (3, 2, 3), padding=1)   # C/G = 4: 4 groups per 16-channel tile
    assert conv_wgrad.tile_counts(cfg, p) == (1, 6 * 2, 1)
    assert conv_wgrad.tile_counts(dataclasses.replace(cfg, kloop="diag"), p) == (1, 18 * 2, 1)
    # 'taprow': a column tile per filter row and 16-channel chunk of the group's C/G = 4 channels, per group
    assert conv_wgrad.tile_counts(dataclasses.replace(cfg, kloop="taprow"), p) == (1, 6, 8)


def test_sixteen_warps_limit_accumulators():
    arch = td.Registry("sm_90").arch
    big = ConvConfig(family="igemm", direction="bwd_weight", ndim=2, dtype="bf16", block_m=256, block_n=256,
                     block_k=32, num_warps=16, num_stages=3)
    assert "num_warps" in [field for field, _ in conv_config_errors(big, arch)]


# the preset candidates meant for each kind of problem (ndim 2; ndim 1/3 differ only in the index math)
BUILT_CANDIDATES = (0, 4, 5, 8, 9)


@pytest.mark.slow
def test_candidates_compile_for_sm90(build_registry):
    arch = build_registry(_built_candidates()).arch   # asserts that every instance compiled
    for ndim in (1, 2, 3):
        for dtype in ("bf16", "fp16"):
            for cfg in conv_wgrad.candidate_configs(dtype, ndim):
                assert not conv_config_errors(cfg, arch), cfg.name
