"""Family `direct`, kloop 'roll' (depthwise rows rolled through accumulators, every direction): the interpreter
vs the float64 reference, the row chunking of its launch plans, its config and problem-match rules, sm_90
compiles."""
from __future__ import annotations

import pytest

import tiledispatch as td
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.kernels.family import config_errors as conv_config_errors
from tiledispatch.kernels.family import problem_mismatch as conv_problem_mismatch
from tiledispatch.kernels import conv_roll
from tiledispatch.kernels.family import family_module
from tiledispatch.testing.reference import run_and_validate

# align 8: fp16, two 8-channel vectors per 16-channel tile (24 channels: a half-masked second tile), fwd with
# bias and an activation; align 1: fp32, 5 channels (odd), a 2-wide unroll where the filter allows it
A8 = {"family": "direct", "kloop": "roll", "dtype": "fp16", "block_m": 16, "block_n": 16, "block_k": 3,
      "num_warps": 1, "align": 8}
A1 = {**A8, "dtype": "fp32", "block_n": 8, "align": 1}
CHANNELS = {8: 24, 1: 5}
# Per (direction, ndim): odd sizes, asymmetric padding, filter heights 3, 2 and 1; fwd takes stride 2 and
# dilation 2 along W (and D), which the roll allows (only H must be unit), bwd_data dilation 2 along W
GEOMETRY = {
    ("fwd", 2): {"spatial": (8, 9), "filter": (3, 3), "stride": (1, 2), "padding": ((1, 0), (1, 2)),
                 "dilation": (1, 2)},
    ("fwd", 3): {"spatial": (5, 6, 7), "filter": (2, 2, 3), "stride": (2, 1, 1), "padding": ((1, 0), (0, 1),
                 (1, 1)), "dilation": (2, 1, 1)},
    # fwd with stride 2 along H (the two-slot entry): odd heights, a filter of 2 rows in 3-D
    ("fwd_s2", 2): {"spatial": (9, 8), "filter": (3, 3), "stride": (2, 1), "padding": ((1, 1), (1, 0))},
    ("fwd_s2", 3): {"spatial": (3, 7, 6), "filter": (3, 2, 3), "stride": (1, 2, 2), "padding": ((1, 1), (0, 1),
                    (1, 1))},
    # bwd_weight, stride 1 and 2 along H (its two entries); dilation 2 along W, a filter 2 rows high in 3-D
    ("bwd_weight", 2): {"spatial": (8, 9), "filter": (3, 3), "stride": (1, 2), "padding": ((1, 0), (1, 1)),
                        "dilation": (1, 2)},
    ("bwd_weight", 3): {"spatial": (3, 6, 5), "filter": (2, 2, 3), "stride": (2, 1, 1), "padding": ((1, 0),
                        (0, 1), (1, 1))},
    ("bwd_weight_s2", 2): {"spatial": (9, 8), "filter": (3, 3), "stride": (2, 1), "padding": ((1, 1), (1, 0))},
    ("bwd_weight_s2", 3): {"spatial": (3, 7, 6), "filter": (3, 3, 2), "stride": (1, 2, 2), "padding": ((1, 1),
                           (0, 1), (1, 0))},
    ("bwd_data", 2): {"spatial": (8, 7), "filter": (3, 3), "padding": ((2, 0), (0, 1)), "dilation": (1, 2)},
    ("bwd_data", 3): {"spatial": (3, 5, 4), "filter": (3, 1, 3), "padding": ((1, 1), (0, 0), (1, 2))},
}
# 1 SM: several written rows per program (fwd 2-D a8: 7 rows in chunks of 3, the last one 2 rows past the
# height); 132: one row per program. Every case runs on 1 SM; on 132 the align-8 ones (fp16, bias and
# activation, vector loads, a half-masked channel tile): the row plan does not depend on dtype or
# alignment, and the align-1 ones (fp32, odd channels) run their rows in chunks on 1 SM.
SMS = (1, 132)


def _case(key, ndim, fields):
    direction = key.split("_s")[0]
    cfg = ConvConfig(direction=direction, ndim=ndim, **fields)
    if direction == "fwd" and fields["align"] == 8:
        cfg = cfg.with_epilogue("gelu_tanh" if ndim == 2 else "silu", True)
    c = CHANNELS[fields["align"]]
    problem = td.ConvProblem(direction, 2, c, c, c, dtype=cfg.dtype, bias=cfg.bias, activation=cfg.activation,
                             **GEOMETRY[key, ndim])
    return cfg, problem


CASES = [(f"{key}-{nd}d-a{fields['align']}", *_case(key, nd, fields))
         for key in ("fwd", "fwd_s2", "bwd_data", "bwd_weight", "bwd_weight_s2") for nd in (2, 3)
         for fields in (A8, A1)]


RUNS = [(sms, *case) for sms in SMS for case in CASES if sms == 1 or case[1].align == 8]


def _bf16_instances() -> list[ConvConfig]:
    """A bf16 instance per direction and ndim (2-D, 3-D) at tiles a preset would use."""
    return [ConvConfig(family="direct", kloop="roll", direction=direction, ndim=ndim, dtype="bf16",
                       block_m=bm, block_n=bn, block_k=3, num_warps=warps, num_stages=1, align=8)
            for direction in ("fwd", "bwd_data", "bwd_weight")
            for ndim, (bm, bn, warps) in ((2, (64, 32, 8)), (3, (32, 64, 8)))]


def prebuild_registries(items, load_script):
    """(tests/conftest.py) The instances of `registries` and of the sm_90 compile test, when selected."""
    out = [[cfg for _, cfg, _ in CASES]] if any("registries" in item.fixturenames for item in items) else []
    if any(item.name == "test_bf16_instances_compile_for_sm90" for item in items):
        out.append(_bf16_instances())
    return out


@pytest.fixture(scope="module")
def registries(build_registry):
    """Per SM count, a registry of every case's instance (compiled once: the second is served from the
    cache)."""
    configs = list(dict.fromkeys(cfg for _, cfg, _ in CASES))
    return {sms: build_registry(configs, sms=sms) for sms in SMS}


@pytest.mark.parametrize("sms, cfg, problem", [(sms, cfg, problem) for sms, _, cfg, problem in RUNS],
                         ids=[f"sms{sms}-{name}" for sms, name, _, _ in RUNS])
@pytest.mark.slow
def test_matches_reference(registries, sms, cfg, problem):
    assert conv_problem_mismatch(cfg, problem) is None
    _, _, result = run_and_validate(registries[sms].get(cfg.name), problem)
    assert result["passed"], result


def test_the_roll_has_a_module_of_its_own():
    assert family_module(ConvConfig(**A8)) is conv_roll
    assert family_module(ConvConfig(**{**A8, "kloop": "tap"})).__name__.endswith("conv_direct")


@pytest.mark.parametrize("sms", [1, 8, 132])
@pytest.mark.parametrize("height", [1, 7, 56, 112])
def test_row_chunks_cover_every_written_row_once(sms, height):
    cfg = ConvConfig(**A8)
    problem = td.ConvProblem("fwd", 4, 32, 32, 32, (height, 40), (3, 3), padding=1)
    rows, programs = conv_roll.rows_plan(cfg, problem, sms)
    chunks = -(-height // rows)
    assert 1 <= rows <= min(conv_roll.MAX_ROWS, height)
    assert (chunks - 1) * rows < height <= chunks * rows            # no empty chunk, none missing
    assert programs == 4 * chunks * -(-40 // cfg.block_m)
    plan = conv_roll.launch_plan(cfg, problem, sms)
    assert dict(plan.scalars) == {"ROWS": rows}
    assert plan.grids[0] == (programs * -(-32 // cfg.block_n), 1, 1)   # 2-D: no weight repack, no workspace
    assert plan.workspaces == ()


def test_more_sms_get_shorter_chunks():
    cfg = ConvConfig(**A8)
    problem = td.ConvProblem("fwd", 8, 64, 64, 64, (56, 56), (3, 3), padding=1)
    assert conv_roll.rows_plan(cfg, problem, 1)[0] == 28        # the fewest chunks of <= 32 rows: two of 28
    assert conv_roll.rows_plan(cfg, problem, 132)[0] < 28


@pytest.mark.parametrize("change, field", [
    ({"ndim": 1}, "ndim"),
    ({"block_m": 128, "block_n": 64, "num_warps": 1}, "num_warps"),   # 3 x 256 values per thread
    ({"direction": "bwd_weight", "block_m": 32}, "num_warps"),        # 9 tiles x 16 values per thread
    ({"direction": "bwd_weight", "split_k": 4}, "split_k"),           # split by row strips
    ({"block_k": 6}, "block_k"),
    ({"family": "igemm", "block_m": 64, "block_n": 64, "block_k": 32}, "kloop"),
])
def test_config_errors_name_the_field(change, field):
    arch = td.Registry("sm_90").arch
    assert conv_config_errors(ConvConfig(**A8), arch) == []
    errors = dict(conv_config_errors(ConvConfig(**{**A8, **change}), arch))
    assert field in errors, errors


@pytest.mark.parametrize("change, reason", [
    ({"k": 48}, "c_per_group"),                                   # a depth multiplier of 2
    ({"groups": 12}, "c_per_group"),                              # 2 channels per group
    ({"filter": (5, 3)}, "filter"),                               # taller than the three slots
    ({"filter": (3, 5)}, "filter"),                               # wider than the unroll
    ({"stride": (3, 1)}, "stride"),                               # fwd rolls H with stride 1 or 2
    ({"dilation": (2, 1)}, "dilation"),
    ({"direction": "bwd_data", "stride": (1, 2)}, "stride"),      # bwd_data: stride 1 everywhere
    ({"direction": "bwd_weight", "stride": (3, 1)}, "stride"),    # bwd_weight: 1 or 2 along H
])
def test_problem_mismatch_reasons(change, reason):
    cfg = ConvConfig(**{**A8, "direction": change.get("direction", "fwd")})
    fields = {"direction": "fwd", "n": 1, "c": 24, "k": 24, "groups": 24, "spatial": (9, 9), "filter": (3, 3),
              "dtype": "fp16", **change}
    problem = td.ConvProblem(**fields)
    assert conv_problem_mismatch(cfg, problem).startswith(reason)
    ok = td.ConvProblem(**{**fields, **{key: value for key, value in (
        ("k", 24), ("groups", 24), ("filter", (3, 3)), ("stride", 1), ("dilation", 1))}})
    assert conv_problem_mismatch(cfg, ok) is None


@pytest.mark.parametrize("direction, stride, launched", [
    ("fwd", (1, 2), [True, False]), ("fwd", (2, 1), [False, True]), ("bwd_data", (1, 1), [True]),
    ("bwd_weight", (1, 1), [True, False]), ("bwd_weight", (2, 2), [False, True])])
def test_the_entry_of_the_problems_stride_launches(direction, stride, launched):
    cfg = ConvConfig(**{**A8, "direction": direction})
    problem = td.ConvProblem(direction, 2, 32, 32, 32, (12, 12), (3, 3), stride=stride, padding=1)
    grids = conv_roll.launch_plan(cfg, problem, 132).grids
    assert len(grids) == len(launched) + (2 if direction == "bwd_weight" else 0)   # (2-D: no pack; reduce last)
    assert [min(g) > 0 for g in grids[:len(launched)]] == launched


@pytest.mark.parametrize("direction, ndim, packs", [
    ("fwd", 2, False), ("fwd", 3, True), ("bwd_data", 2, False), ("bwd_data", 3, True),
    ("bwd_weight", 2, False), ("bwd_weight", 3, False)])
def test_only_3d_fwd_and_bwd_data_repack_the_weight(direction, ndim, packs):
    """2-D loads the weights once per program straight from w; 3-D reads a filter depth per source row from the
    fp32 tap-major repack (an extra entry and workspace); bwd_weight writes the weight."""
    cfg = ConvConfig(**{**A8, "direction": direction, "ndim": ndim})
    problem = td.ConvProblem(direction, 2, 32, 32, 32, (5, 6, 7)[3 - ndim:], (3,) * ndim, padding=1)
    plan = conv_roll.launch_plan(cfg, problem, 132)
    names = [entry.fn for entry in conv_roll.entries(cfg)]
    assert conv_roll.packs_weight(cfg) is packs
    assert ("conv_direct_wpack_kernel" in names) is packs
    assert (("ws_ptr", 27 * 32, "fp32") in plan.workspaces) is packs
    assert len(plan.grids) == len(names)


@pytest.mark.parametrize("sms", [1, 132])
def test_wgrad_splits_are_the_row_strips(sms):
    """Every row strip writes its own split of ws[SPLIT, taps, K]; 3-D strips repeat per filter depth."""
    cfg = ConvConfig(**{**A8, "direction": "bwd_weight", "ndim": 3})
    problem = td.ConvProblem("bwd_weight", 2, 40, 40, 40, (4, 10, 12), (3, 3, 3), padding=1)
    plan = conv_roll.launch_plan(cfg, problem, sms)
    rows, strips = conv_roll.rows_plan(cfg, problem, sms)
    assert dict(plan.scalars) == {"ROWS": rows, "SPLIT": strips}
    assert plan.grids[0] == (strips * -(-40 // cfg.block_n), 1, 3)   # channel tiles and strips on axis 0
    assert plan.workspaces == (("ws_ptr", strips * 27 * 40, "fp32"),)


@pytest.mark.slow
def test_bf16_instances_compile_for_sm90(build_registry):
    for cfg in _bf16_instances():
        assert conv_config_errors(cfg, td.get_arch("sm_90")) == [], cfg.name
    build_registry(_bf16_instances())   # asserts that every instance compiled
