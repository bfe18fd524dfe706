"""kloop 'roll' past three filter rows (fwd / bwd_data at block_k 5 and 7: 5 and 7 rolling accumulators, the
weights loaded per source row from the repack): the interpreter vs the float64 reference on 5x5 and 7x7
depthwise layers, the rules that bound it, and an sm_90 compile of a 7x7 instance per direction.

The interpreter cases' instances and the 7x7 bf16 instances compile in one worker pool (the module's `built`
fixture; the session's prebuild worker takes them first), the two ~40 s fwd 2-D compiles first: each 7x7 roll
compile takes 7-40 s on a CI core."""
from __future__ import annotations

import dataclasses

import pytest

import tiledispatch as td
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.naming import parse_name
from tiledispatch.kernels import conv_direct, conv_roll
from tiledispatch.kernels.family import config_errors, problem_mismatch
from tiledispatch.testing.reference import run_and_validate

# fp16 align 8 (24 channels: a half-masked second channel tile; fwd with bias and an activation), fp32 align 1
# (5 channels)
A8 = {"family": "direct", "kloop": "roll", "dtype": "fp16", "block_m": 16, "block_n": 16, "block_k": 3,
      "num_warps": 1, "align": 8}
A1 = {**A8, "dtype": "fp32", "block_n": 8, "align": 1}
CHANNELS = {8: 24, 1: 5}
# (direction, ndim, block_k): odd sizes, padding 2 / 3 (asymmetric too), stride 2 along H for the fwd entry of
# stride 2, filters lower than the slots (their missing rows get zero weights), one narrower than block_k
GEOMETRY = {
    ("fwd", 2, 7): {"spatial": (11, 9), "filter": (7, 7), "padding": 3},
    ("fwd", 2, 5): {"spatial": (9, 10), "filter": (5, 5), "stride": (1, 2), "padding": ((2, 1), (2, 2))},
    ("fwd_s2", 2, 7): {"spatial": (13, 9), "filter": (7, 7), "stride": (2, 1), "padding": 3},
    ("fwd_s2", 2, 5): {"spatial": (12, 7), "filter": (4, 5), "stride": (2, 2), "padding": ((2, 1), (2, 2))},
    ("fwd", 3, 7): {"spatial": (2, 8, 7), "filter": (2, 7, 7), "padding": ((1, 0), (3, 3), (3, 3))},
    ("fwd_s2", 3, 5): {"spatial": (3, 11, 7), "filter": (1, 5, 3), "stride": (1, 2, 1), "padding": (0, 2, 1)},
    ("bwd_data", 2, 7): {"spatial": (11, 9), "filter": (7, 7), "padding": 3},
    ("bwd_data", 2, 5): {"spatial": (9, 8), "filter": (5, 4), "padding": ((2, 2), (1, 2))},
    ("bwd_data", 3, 7): {"spatial": (3, 9, 7), "filter": (3, 7, 7), "padding": (1, 3, 3)},
}


def _case(key, ndim, block_k, fields):
    direction = key.split("_s")[0]
    cfg = ConvConfig(**{**fields, "direction": direction, "ndim": ndim, "block_k": block_k})
    if direction == "fwd" and fields["align"] == 8:
        cfg = cfg.with_epilogue("gelu_tanh", True)
    c = CHANNELS[fields["align"]]
    problem = td.ConvProblem(direction, 2, c, c, c, dtype=cfg.dtype, bias=cfg.bias, activation=cfg.activation,
                             **GEOMETRY[key, ndim, block_k])
    return cfg, problem


# A representative share of GEOMETRY x (A8, A1) runs in the slow lane (7x7 fwd with its epilogue, stride 2
# and 3-D; 7x7 and 5x5 bwd_data; 5x5 fwd with a wide stride). The 7x7 stride-2 fwd runs on the a8 instance of
# the 7x7 fwd (a 2-D fwd 7x7 instance compiles in ~40 s; fp32 align 1 at 7 slots: the 3-D fwd and bwd_data).
CHOSEN = {("fwd", 2, 7, 8), ("fwd_s2", 2, 7, 8), ("fwd", 3, 7, 1), ("bwd_data", 2, 7, 1),
          ("bwd_data", 2, 5, 8), ("fwd", 2, 5, 1)}
CASES = [(f"{key}-{nd}d-k{bk}-a{fields['align']}", *_case(key, nd, bk, fields))
         for key, nd, bk in GEOMETRY for fields in (A8, A1) if (key, nd, bk, fields["align"]) in CHOSEN]
# Launch plans for 2 SMs: 2-6 written rows per program (ROWS), so the slots roll across rows, row chunks start
# inside the image and the last one runs past its height, on a 3-4x smaller grid than with 132 SMs (ROWS 1 on
# these small layers: test_conv_roll runs ROWS 1 for every direction).
SMS = 2


def wide_bf16() -> list[ConvConfig]:
    """A bf16 7x7 instance per direction it rolls (2-D and 3-D), at tiles a preset would use."""
    out = []
    for direction in ("fwd", "bwd_data"):
        for ndim, (bm, bn, warps) in ((2, (32, 32, 4)), (3, (16, 64, 4))):
            out.append(ConvConfig(family="direct", kloop="roll", direction=direction, ndim=ndim, dtype="bf16",
                                  block_m=bm, block_n=bn, block_k=7, num_warps=warps, num_stages=2, align=8))
    return out


def _registry() -> td.Registry:
    """The cases' instances and wide_bf16() for sm_90, the 2-D fwd 7x7 instances (~40 s each, the others
    5-8 s) first: a pool runs them side by side."""
    arch = td.get_arch("sm_90")
    registry = td.Registry(arch.with_device(SMS, arch.reference_gpu))
    configs = list(dict.fromkeys([*(cfg for _, cfg, _ in CASES), *wide_bf16()]))
    for cfg in sorted(configs, key=lambda c: not (c.direction == "fwd" and c.ndim == 2 and c.block_k == 7)):
        registry.add(cfg)
    return registry


# The session's prebuild worker takes this module's instances before the others' (tests/conftest.py): its two
# ~40 s compiles are the longest of the slow lane, and one worker runs them as fast as a pool would
PREBUILD_FIRST = True


def prebuild_registries(items, load_script):
    """(tests/conftest.py) The instances of `built`, when a selected test uses it."""
    return [_registry()] if any("built" in item.fixturenames for item in items) else []


@pytest.fixture(scope="module")
def built(prebuild):
    """(registry, build report) of the cases' instances and wide_bf16(), compiled in one pool for sm_90 (what
    the session's prebuild worker has not compiled yet)."""
    prebuild.claim(__name__)
    registry = _registry()
    return registry, registry.build(max_workers=2)


@pytest.mark.parametrize("cfg, problem", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
@pytest.mark.slow
def test_matches_reference(built, cfg, problem):
    registry, report = built
    assert cfg.name not in report.failed, report.failed[cfg.name]
    assert problem_mismatch(cfg, problem) is None
    _, _, result = run_and_validate(registry.get(cfg.name), problem)
    assert result["passed"], result


@pytest.mark.parametrize("direction, block_k, rows, per_row", [
    ("fwd", 3, 3, False), ("fwd", 4, 4, True), ("fwd", 5, 5, True), ("fwd", 7, 7, True),
    ("bwd_data", 7, 7, True), ("bwd_data", 2, 3, False), ("bwd_weight", 7, 3, False)])
def test_slots_follow_block_k_in_fwd_and_bwd_data(direction, block_k, rows, per_row):
    cfg = ConvConfig(**{**A8, "direction": direction, "block_k": block_k})
    assert conv_roll.rolled_rows(cfg) == rows
    assert conv_roll.loads_weights_per_row(cfg) is per_row
    assert conv_roll.packs_weight(dataclasses.replace(cfg, ndim=2)) is per_row


@pytest.mark.parametrize("direction, stride, filt, fits", [
    ("fwd", 1, (7, 7), True), ("fwd", 2, (7, 7), True), ("fwd", 1, (7, 3), True),
    ("bwd_data", 1, (7, 7), True), ("fwd", 1, (9, 7), False), ("bwd_weight", 1, (7, 7), False),
    ("bwd_weight", 1, (3, 7), True)])
def test_filter_heights_up_to_the_slots(direction, stride, filt, fits):
    cfg = ConvConfig(**{**A8, "direction": direction, "block_k": 7, "block_m": 8})
    problem = td.ConvProblem(direction, 1, 24, 24, 24, (14, 14), filt, stride=(stride, 1), padding=3,
                             dtype="fp16")
    reason = problem_mismatch(cfg, problem)
    assert (reason is None) is fits, reason
    if not fits:
        assert reason.startswith("filter"), reason


def test_a_5x5_problem_needs_5_slots():
    problem = td.ConvProblem("fwd", 1, 24, 24, 24, (14, 14), (5, 5), padding=2, dtype="fp16")
    assert problem_mismatch(ConvConfig(**{**A8, "block_k": 5}), problem) is None
    assert problem_mismatch(ConvConfig(**{**A8, "block_k": 4}), problem).startswith("filter")


def test_resources_scale_with_the_slots():
    arch = td.Registry("sm_90").arch
    base = {**A8, "block_m": 32, "block_n": 32, "num_warps": 4, "num_stages": 3}
    three, seven = ConvConfig(**base), ConvConfig(**{**base, "block_k": 7})
    assert conv_roll.resources(three).accumulators == 3 * 8
    assert conv_roll.resources(seven).accumulators == 7 * 8
    # two stages of 2 x 7 source tiles (fp16) and of 7 x 7 fp32 weight vectors of 32 channels
    assert conv_roll.resources(seven).shared_memory == 2 * (14 * 32 * 32 * 2 + 49 * 32 * 4)
    assert config_errors(seven, arch) == []
    # 7 tiles of 32 values per thread: past the accumulator budget
    errors = dict(config_errors(dataclasses.replace(seven, num_warps=1), arch))
    assert "7 32x32 accumulator tiles" in errors["num_warps"], errors
    # the rows' stages fit, with the weights' they overflow shared memory: a roll-specific error names
    # num_stages
    wide = ConvConfig(**{**base, "block_m": 1, "block_n": 1024, "num_warps": 8, "block_k": 7, "num_stages": 2,
                         "dtype": "fp32", "align": 1})
    assert conv_direct.shared_memory_bytes(wide) <= arch.smem_per_block
    assert conv_roll.resources(wide).shared_memory > arch.smem_per_block
    errors = dict(config_errors(wide, arch))
    assert "weight vectors" in errors.get("num_stages", ""), errors


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_names_round_trip(direction):
    cfg = ConvConfig(**{**A8, "direction": direction, "block_k": 7, "dtype": "bf16"})
    assert parse_name(cfg.name) == cfg
    assert "-16x16x7-" in cfg.name and "-roll-" in cfg.name


def test_2d_launch_packs_the_weight_first():
    cfg = ConvConfig(**{**A8, "block_k": 7})
    problem = td.ConvProblem("fwd", 2, 48, 48, 48, (14, 14), (7, 7), padding=3, dtype="fp16")
    plan = conv_roll.launch_plan(cfg, problem, 132)
    assert [e.fn for e in conv_roll.entries(cfg)][0] == "conv_direct_wpack_kernel"
    assert plan.workspaces == (("ws_ptr", 49 * 48, "fp32"),)
    assert len(plan.grids) == len(conv_roll.entries(cfg)) == 3


@pytest.mark.slow
def test_7x7_instances_compile_for_sm90(built):
    """A bf16 7x7 instance per direction it rolls (2-D and 3-D), compiled for sm_90 without a GPU (in the
    module's pool)."""
    registry, report = built
    configs = wide_bf16()
    assert len({(cfg.direction, cfg.ndim) for cfg in configs}) == 4
    for cfg in configs:
        assert config_errors(cfg, registry.arch) == [], cfg.name
        assert cfg.name not in report.failed, report.failed[cfg.name]
        assert registry.get(cfg.name).built, cfg.name
