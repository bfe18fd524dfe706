"""Family `direct` (depthwise / few channels per group, every direction): the interpreter vs the float64
reference, its problem-match rules, launch plans (entry choice, bwd_weight splits), per-ndim rendering, and
sm_90 compiles of the instances recommended for presets."""
from __future__ import annotations

import dataclasses

import pytest

import tiledispatch as td
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.kernels.family import config_errors as conv_config_errors
from tiledispatch.kernels.family import problem_mismatch as conv_problem_mismatch
from tiledispatch.kernels import conv_direct
from tiledispatch.testing.reference import run_and_validate

DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
# align 1: fp32, 16x8 tiles, 1 warp (bwd_weight: 4 values per thread, so 9 taps per chunk);
# align 8: fp16, 32x16 tiles (two 8-channel vectors), 1 warp (bwd_weight: 16 per thread, 3 taps per chunk),
# bwd_weight with an explicit split of 4 (more splits than the tiny problems have pixel blocks: empty splits
# must still write their partials), the fwd one with bias and an activation that rotates with ndim.
A1 = {"family": "direct", "dtype": "fp32", "block_m": 16, "block_n": 8, "block_k": 1, "num_warps": 1, "align": 1}
A8 = {"family": "direct", "dtype": "fp16", "block_m": 32, "block_n": 16, "block_k": 1, "num_warps": 1, "align": 8}
# align 2 and 4 (channel totals like 54 or 108): 4- and 8-byte vectors, fp16, 16-channel tiles
A2, A4 = ({**A8, "align": 2}, {**A8, "align": 4})
ACTIVATION = {1: "relu", 2: "gelu_tanh", 3: "silu"}

# Per ndim: odd sizes, stride 2 and dilation 2 on some dims, asymmetric padding ((1, 0), (0, 2) ...).
GEOMETRY = {
    1: {"spatial": (11,), "filter": (3,), "stride": 2, "padding": ((1, 0),), "dilation": 2},
    2: {"spatial": (5, 7), "filter": (3, 2), "stride": (2, 1), "padding": ((1, 0), (0, 2)), "dilation": (1, 2)},
    3: {"spatial": (3, 4, 5), "filter": (2, 3, 3), "stride": (1, 2, 2), "padding": ((0, 1), (1, 1), (2, 0)),
        "dilation": (2, 1, 1)},
}
# (n, c, k, groups) per category; the align-1 ones have odd channel counts.
SIZES = {
    "depthwise": (2, 24, 24, 24),        # align 8: the dw entry, vector loads, a half-masked second channel tile
    "depthwise_a1": (2, 5, 5, 5),        # align 1: the dw entry without vector hints, odd channels
    "depthwise_a2": (2, 6, 6, 6),        # align 2: 3 pairs of channels in a 16-channel tile
    "depthwise_a4": (1, 20, 20, 20),     # align 4: a full tile, then one of 4 channels (one 8-byte vector)
    "multiplier": (1, 5, 10, 5),         # K/G = 2, C/G = 1: the grouped entry (channel gathers)
    "cg2": (2, 6, 9, 3),                 # C/G = 2, K/G = 3
    "cg3": (1, 24, 16, 8),               # C/G = 3, K/G = 2 with align 8 (fp16)
    "cg4": (1, 8, 8, 2),                 # C/G = 4, K/G = 4
}
# category -> (config fields, ndims)
CASES = {
    "depthwise": (A8, (1, 2, 3)),
    "depthwise_a1": (A1, (2,)),
    "depthwise_a2": (A2, (2,)),
    "depthwise_a4": (A4, (1, 3)),
    "multiplier": (A1, (1, 2, 3)),
    "cg2": (A1, (1,)),
    "cg3": (A8, (2,)),
    "cg4": (A1, (3,)),
}
# bwd_data pixels that no tap reaches (stride 3 > filter span 2): NaN poisoning checks that dx = 0 is written
NO_TAP = {"spatial": (10,), "filter": (2,), "stride": 3, "padding": ((0, 1),)}
# bwd_data phases: stride 3 with dilation 2 (every phase meets its own taps) and stride 2 with dilation 2 on
# h (the phases of odd i + pad meet no tap: dx = 0); an input 1 pixel high under stride 2 (an empty phase)
PHASES = {
    "s3d2": {"spatial": (4, 11), "filter": (2, 3), "stride": (1, 3), "padding": ((1, 0), (2, 1)),
             "dilation": (1, 2)},
    "s2d2": {"spatial": (7, 6), "filter": (3, 2), "stride": (2, 2), "padding": ((2, 1), (0, 1)),
             "dilation": (2, 1)},
    "empty": {"spatial": (1, 5), "filter": (1, 3), "stride": (2, 2), "padding": ((0, 0), (1, 1))},
}


def _config(direction, ndim, fields):
    cfg = ConvConfig(direction=direction, ndim=ndim, **fields)
    if direction == "fwd" and fields["align"] == 8:
        cfg = cfg.with_epilogue(ACTIVATION[ndim], True)
    if direction == "bwd_weight" and fields["align"] == 8:
        cfg = dataclasses.replace(cfg, split_k=4)
    return cfg


def _problem(cfg, sizes, geometry=None):
    n, c, k, groups = sizes
    return td.ConvProblem(cfg.direction, n, c, k, groups, dtype=cfg.dtype, bias=cfg.bias,
                          activation=cfg.activation, **(geometry or GEOMETRY[cfg.ndim]))


def _numeric_cases():
    out = []
    for direction in DIRECTIONS:
        for name, (fields, ndims) in CASES.items():
            for ndim in ndims:
                cfg = _config(direction, ndim, fields)
                out.append((f"{direction}-{ndim}d-{name}", cfg, _problem(cfg, SIZES[name])))
    for name in ("depthwise_a1", "cg2"):
        cfg = _config("bwd_data", 1, A1)
        out.append((f"bwd_data-1d-{name}-no-tap", cfg, _problem(cfg, SIZES[name], NO_TAP)))
    for phase, geometry in PHASES.items():
        for name, fields in (("depthwise", A8), ("cg2", A1)):
            cfg = _config("bwd_data", 2, fields)
            out.append((f"bwd_data-2d-{name}-phases-{phase}", cfg, _problem(cfg, SIZES[name], geometry)))
    # innermost filter dim unrolled by 3: wider than the 2-D geometry's filter width 2 (one tap masked), equal
    # to the 3-D one's 3; depthwise (align 8, fp16) and grouped C/G = 2 (align 1, fp32)
    for direction in ("fwd", "bwd_data"):
        for name, fields, ndim in (("depthwise", A8, 2), ("depthwise", A8, 3), ("cg2", A1, 2)):
            cfg = _config(direction, ndim, {**fields, "block_k": 3})
            out.append((f"{direction}-{ndim}d-{name}-unroll3", cfg, _problem(cfg, SIZES[name])))
    return out


NUMERIC = _numeric_cases()

# Recommended preset instances (bf16, align 8) per direction; one per (direction, ndim) compiles here, the tile
# rotating with ndim (the numeric cases compile every direction x ndim in fp16/fp32, align 1 and 8, as well).
RECOMMENDED_TILES = {
    "fwd": ((32, 64, 4), (64, 64, 8), (128, 32, 8), (64, 16, 2)),
    "bwd_data": ((32, 64, 4), (64, 64, 8), (128, 32, 8), (64, 16, 2)),
    "bwd_weight": ((32, 32, 4), (64, 64, 16), (32, 64, 4), (64, 16, 4)),
}


def recommended() -> list[ConvConfig]:
    return [ConvConfig(family="direct", direction=d, ndim=ndim, dtype="bf16", block_m=bm, block_n=bn, block_k=1,
                       num_warps=w, num_stages=2, align=8)
            for d, tiles in RECOMMENDED_TILES.items() for ndim in (1, 2, 3) for bm, bn, w in tiles[ndim - 1:ndim]]


def prebuild_registries(items, load_script):
    """(tests/conftest.py) The instances of `registry` and of the sm_90 compile test, when selected."""
    out = [[cfg for _, cfg, _ in NUMERIC]] if any("registry" in item.fixturenames for item in items) else []
    if any(item.name == "test_recommended_instances_compile_for_sm90" for item in items):
        out.append(recommended())
    return out


@pytest.fixture(scope="module")
def registry(build_registry):
    return build_registry([cfg for _, cfg, _ in NUMERIC])


@pytest.mark.parametrize("cfg, problem", [case[1:] for case in NUMERIC], ids=[case[0] for case in NUMERIC])
@pytest.mark.slow
def test_matches_reference(registry, cfg, problem):
    assert conv_problem_mismatch(cfg, problem) is None
    _, _, result = run_and_validate(registry.get(cfg.name), problem)
    assert result["passed"], result


@pytest.mark.slow
def test_recommended_instances_compile_for_sm90(build_registry):
    for cfg in recommended():
        assert conv_config_errors(cfg, td.get_arch("sm_90")) == [], cfg.name
    build_registry(recommended())   # asserts that every instance compiled


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_source_names_only_the_configs_dims(ndim):
    src = conv_direct.render(ConvConfig(family="direct", direction="bwd_weight", ndim=ndim, block_k=1))
    for s in ("d", "h", "w"):
        assert (f"flt_{s}" in src) == (s in conv_direct.dims(ConvConfig(ndim=ndim))), s


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("groups, k", [(16, 16), (16, 32), (4, 16)])
def test_one_compute_entry_launches(direction, groups, k):
    cfg = ConvConfig(family="direct", direction=direction, ndim=2, block_m=32, block_n=16, block_k=1)
    problem = td.ConvProblem(direction, 2, 16, k, groups, (6, 6), (3, 3))
    grids = conv_direct.launch_plan(cfg, problem, 132).grids
    launched = [min(g) > 0 for g in grids]
    depthwise = groups == 16 and k == 16
    if direction == "bwd_weight":   # dw, grouped, then the reduce entries
        assert launched[:2] == ([True, False] if depthwise else [False, True])
    else:                           # pack, dw, dwg, grouped: a small depthwise problem gathers, no repack
        assert launched == ([False, False, True, False] if depthwise else [True, False, False, True])


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
@pytest.mark.parametrize("n, spatial, filt, gathers", [
    (2, (6, 6), (3, 3), True),            # 9 taps, a few KB: dwg, no repack launch
    (2, (6, 6), (5, 5), False),           # 25 taps: the gathers would cost more than the repack
    (2, (4, 4, 4), (3, 3, 3), False),     # 3-D 3x3x3: 27 taps
    (64, (64, 64), (3, 3), False),        # 9 taps on 64 MB (> GATHER_MAX_BYTES)
])
def test_depthwise_repacks_only_when_the_gathers_cost_more(direction, n, spatial, filt, gathers):
    cfg = ConvConfig(family="direct", direction=direction, ndim=len(spatial), block_m=32, block_n=16, block_k=1)
    problem = td.ConvProblem(direction, n, 16, 16, 16, spatial, filt, padding=1)
    launched = [min(g) > 0 for g in conv_direct.launch_plan(cfg, problem, 132).grids]
    assert conv_direct.gathers_weight(problem) is gathers
    assert launched == ([False, False, True, False] if gathers else [True, True, False, False])


def test_reference_cases_cover_both_depthwise_weight_paths():
    """The interpreter checks above run the repacking `dw` entry (3-D, 18 taps) and the gathering `dwg` one
    (1-D and 2-D, few taps on a few KB)."""
    paths = {conv_direct.gathers_weight(td.ConvProblem(d, 2, 24, 24, 24, g["spatial"], g["filter"]))
             for d in ("fwd", "bwd_data") for g in GEOMETRY.values()}
    assert paths == {True, False}


@pytest.mark.parametrize("split_k, sms", [(0, 132), (0, 1), (4, 132), (128, 132)])
def test_wgrad_split_covers_every_pixel(split_k, sms):
    cfg = ConvConfig(family="direct", direction="bwd_weight", ndim=2, block_m=32, block_n=16, block_k=1,
                     split_k=split_k)
    problem = td.ConvProblem("bwd_weight", 3, 32, 32, 32, (9, 11), (3, 3), stride=2)
    split, span = conv_direct.split_plan(cfg, problem, sms)
    pixels = 3 * 4 * 5                                                     # output 4 x 5
    assert span % cfg.block_m == 0 and split * span >= pixels
    if split_k:
        assert split == split_k
    else:
        assert (split - 1) * span < pixels    # no empty split when chosen automatically
    plan = conv_direct.launch_plan(cfg, problem, sms)
    assert plan.workspaces == (("ws_ptr", split * 9 * 32, "fp32"),)
    assert dict(plan.scalars) == {"SPAN": span, "SPLIT": split}


def test_mismatch_reasons():
    cfg = ConvConfig(family="direct", direction="fwd", ndim=2, dtype="fp16", block_m=32, block_n=16, block_k=1)
    dense = td.ConvProblem("fwd", 1, 64, 64, 2, (5, 5), (3, 3), dtype="fp16")     # C/G = 32
    assert conv_problem_mismatch(cfg, dense).startswith("c_per_group")
    huge = td.ConvProblem("fwd", 4096, 8, 8, 8, (512, 512), (1, 1), dtype="fp16")   # 2^30 pixels
    assert conv_problem_mismatch(cfg, huge).startswith("spatial")
    odd = td.ConvProblem("fwd", 1, 12, 12, 12, (5, 5), (3, 3), dtype="fp16")       # 12 channels: align 4
    assert odd.align == 4
    assert conv_problem_mismatch(cfg, odd).startswith("align")
    for align in (1, 2, 4):
        assert conv_problem_mismatch(dataclasses.replace(cfg, align=align), odd) is None


def test_unrolled_filter_width_bounds_the_problems():
    arch = td.Registry("sm_90").arch
    cfg = ConvConfig(family="direct", direction="fwd", ndim=2, block_m=32, block_n=16, block_k=3)
    assert conv_config_errors(cfg, arch) == []
    assert "block_k" in dict(conv_config_errors(dataclasses.replace(cfg, block_k=6), arch))
    # bwd_weight: block_k is the tap chunk (1, 3 or 9), which does not bound the filter
    wgrad = dataclasses.replace(cfg, direction="bwd_weight")
    assert conv_config_errors(wgrad, arch) == []
    assert "block_k" in dict(conv_config_errors(dataclasses.replace(wgrad, block_k=5), arch))
    assert "block_k" in dict(conv_config_errors(dataclasses.replace(wgrad, block_k=9, num_warps=1), arch))
    assert conv_problem_mismatch(wgrad, td.ConvProblem("bwd_weight", 1, 8, 8, 8, (9, 9), (3, 5))) is None
    assert conv_problem_mismatch(cfg, td.ConvProblem("fwd", 1, 8, 8, 8, (9, 9), (5, 3))) is None
    assert conv_problem_mismatch(cfg, td.ConvProblem("fwd", 1, 8, 8, 8, (9, 9), (3, 5))).startswith("filter")


def test_bwd_data_grid_has_one_layer_per_phase():
    cfg = ConvConfig(family="direct", direction="bwd_data", ndim=2, block_m=32, block_n=16, block_k=1)
    problem = td.ConvProblem("bwd_data", 2, 16, 16, 16, (9, 10), (3, 3), stride=(3, 2), padding=1)
    _, dw, dwg, grouped = conv_direct.launch_plan(cfg, problem, 132).grids
    assert dwg == (-(-2 * 3 * 5 // 32), 1, 6)   # the largest phase: 3 x 5 input pixels per image
    assert dw[0] == grouped[0] == 0
    many = td.ConvProblem("bwd_data", 1, 8, 8, 8, (600, 600), (1, 1), stride=300)   # 90,000 phases
    assert conv_problem_mismatch(cfg, many).startswith("stride")


def test_align_2_and_4_are_direct_only():
    arch = td.Registry("sm_90").arch
    cfg = ConvConfig(family="direct", direction="fwd", ndim=2, block_m=32, block_n=16, block_k=1, align=4)
    assert conv_config_errors(cfg, arch) == []
    igemm = ConvConfig(family="igemm", direction="fwd", ndim=2, block_m=64, block_n=64, block_k=32, align=2)
    assert "align" in dict(conv_config_errors(igemm, arch))


@pytest.mark.parametrize("sms, kind", [(1, "wide"), (132, "tall")])
@pytest.mark.slow
def test_wgrad_reduce_kinds(build_registry, sms, kind):
    """The two reduce entries: 128 channels x 9 taps = 1,152 partial sums per split fill 2 wide programs, as
    many as 2 waves of a 1-SM device wants (wide), and too few for 132 SMs (tall: 32 splits at once); both
    are checked against the reference, 3 taps per program."""
    cfg = ConvConfig(family="direct", direction="bwd_weight", ndim=2, dtype="fp16", block_m=16, block_n=64,
                     block_k=3, num_warps=2, split_k=8, align=8)
    problem = td.ConvProblem("bwd_weight", 2, 128, 128, 128, (5, 7), (3, 3), padding=1, dtype="fp16")
    plan = conv_direct.launch_plan(cfg, problem, sms)
    assert [grid[0] > 0 for grid in plan.grids[2:]] == [kind == "wide", kind == "tall"]
    registry = build_registry([cfg], sms=sms)
    _, _, result = run_and_validate(registry.get(cfg.name), problem)
    assert result["passed"], result
