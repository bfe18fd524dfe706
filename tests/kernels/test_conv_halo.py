"""kloop 'halo' (kernels/conv_halo.py: depthwise 2-D fwd, bwd_data and bwd_weight, the filter window slid
along W in registers): the interpreter vs the float64 reference on 7x7, 5x5 and 3x3 layers of odd sizes
(bwd_data also vs torch.nn.grad.conv2d_input, bwd_weight vs conv2d_weight), its rules and launch, and an
sm_90 compile of its 7x7 instances."""
from __future__ import annotations

import dataclasses

import pytest

import tiledispatch as td
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.naming import parse_name
from tiledispatch.kernels import conv_halo
from tiledispatch.kernels.family import config_errors, family_module, problem_mismatch
from tiledispatch.testing.reference import assert_case

ARCH = td.get_arch("sm_90")
# fp16 align 8 (24 channels: a half-masked second channel tile), fp32 align 1 (5 channels); 1 warp keeps the
# interpreter's programs few
A8 = {"family": "direct", "kloop": "halo", "direction": "fwd", "dtype": "fp16", "block_m": 4, "block_n": 16,
      "block_k": 7, "num_warps": 1, "num_stages": 1, "align": 8}
A1 = {**A8, "dtype": "fp32", "block_n": 8, "align": 1}
CHANNELS = {8: 24, 1: 5}


def _case(fields, n=2, epilogue=False, **geometry):
    cfg = ConvConfig(**fields)
    if epilogue:
        cfg = cfg.with_epilogue("gelu_tanh", True)
    c = CHANNELS[cfg.align]
    problem = td.ConvProblem(cfg.direction, n, c, c, c, dtype=cfg.dtype, bias=cfg.bias,
                             activation=cfg.activation, **geometry)
    return cfg, problem


def _dgrad(fields):
    return {**fields, "direction": "bwd_data"}


def _wgrad(fields):
    return {**fields, "direction": "bwd_weight"}


# (id, cfg, problem): every row has a width that leaves the last 8-column strip partial and heights that leave
# the last row block partial
FAST = [
    ("7x7-fp16-bias-gelu", *_case(A8, epilogue=True, spatial=(13, 11), filter=(7, 7), padding=3)),
    ("5x5-fp32-stride-w2", *_case({**A1, "block_k": 5}, n=1, spatial=(14, 14), filter=(5, 5), stride=(1, 2),
                                  padding=2)),
    ("3x3-fp32-stride-h2-dil-h2", *_case({**A1, "block_k": 3}, n=1, spatial=(7, 7), filter=(3, 3),
                                         stride=(2, 1), dilation=(2, 1), padding=1)),
]
SLOW = [
    ("7x7-fp32-56x5", *_case({**A1, "block_m": 8}, n=1, spatial=(56, 5), filter=(7, 7), padding=3)),
    ("7x7-fp16-14x14-stride2-asym", *_case(A8, spatial=(14, 14), filter=(7, 7), stride=2,
                                           padding=((3, 2), (3, 2)))),
    ("7x7-fp32-7x7", *_case(A1, n=1, spatial=(7, 7), filter=(7, 7), padding=3)),
    ("k7-on-5x5-fp16", *_case(A8, n=1, spatial=(9, 10), filter=(5, 5), padding=2)),
    ("k7-on-3x7-fp32", *_case(A1, n=1, spatial=(9, 13), filter=(3, 7), padding=(1, 3))),
    ("3x3-fp16-14x14", *_case({**A8, "block_k": 3}, spatial=(14, 14), filter=(3, 3), padding=1)),
]


# bwd_data: stride 1 (its one entry); dx of the sizes above, dy of the sizes the padding gives
FAST_BWD = [
    ("7x7-fp16-13x11", *_case(_dgrad(A8), spatial=(13, 11), filter=(7, 7), padding=3)),
    ("5x5-fp32-14x14", *_case(_dgrad({**A1, "block_k": 5}), n=1, spatial=(14, 14), filter=(5, 5), padding=2)),
    ("3x3-fp32-7x7-dil-h2", *_case(_dgrad({**A1, "block_k": 3}), n=1, spatial=(7, 7), filter=(3, 3),
                                   dilation=(2, 1), padding=1)),
]
SLOW_BWD = [
    ("7x7-fp32-7x7", *_case(_dgrad({**A1, "block_m": 8}), n=1, spatial=(7, 7), filter=(7, 7), padding=3)),
    ("7x7-fp16-14x14-asym", *_case(_dgrad(A8), spatial=(14, 14), filter=(7, 7), padding=((3, 2), (3, 2)))),
    ("7x7-fp32-56x5", *_case(_dgrad(A1), n=1, spatial=(56, 5), filter=(7, 7), padding=3)),
    ("k7-on-5x5-fp16", *_case(_dgrad(A8), n=1, spatial=(9, 10), filter=(5, 5), padding=2)),
    ("k7-on-3x7-fp32-pad0", *_case(_dgrad(A1), n=1, spatial=(9, 13), filter=(3, 7), padding=(1, 0))),
    ("3x3-fp16-14x14", *_case(_dgrad({**A8, "block_k": 3}), spatial=(14, 14), filter=(3, 3), padding=1)),
    ("5x5-fp16-13x11-w2", *_case(_dgrad({**A8, "block_k": 5, "block_n": 8, "num_warps": 2}),
                                 spatial=(13, 11), filter=(5, 5), padding=2)),
]
# Launch plans for SMS SMs: the fwd and bwd_data plans do not depend on the SM count; bwd_weight's do, so
# that the 7x7 case's programs take 2 row chunks of 4 row blocks (block_m 2) of its 13 dy rows, the last block
# cut (test_wgrad_row_chunks)
SMS = 2
FAST_WGRAD = [
    ("7x7-fp16-13x11", *_case(_wgrad({**A8, "block_m": 2}), spatial=(13, 11), filter=(7, 7), padding=3)),
    ("5x5-fp32-14x14", *_case(_wgrad({**A1, "block_k": 5}), n=1, spatial=(14, 14), filter=(5, 5), padding=2)),
    ("3x3-fp32-7x7-dil-h2", *_case(_wgrad({**A1, "block_k": 3}), n=1, spatial=(7, 7), filter=(3, 3),
                                   dilation=(2, 1), padding=1)),
]
SLOW_WGRAD = [
    ("7x7-fp32-7x7", *_case(_wgrad({**A1, "block_m": 8}), n=1, spatial=(7, 7), filter=(7, 7), padding=3)),
    ("7x7-fp16-14x14-asym", *_case(_wgrad(A8), spatial=(14, 14), filter=(7, 7), padding=((3, 2), (3, 2)))),
    ("k7-on-5x5-fp16-13x11", *_case(_wgrad(A8), n=1, spatial=(13, 11), filter=(5, 5), padding=2)),
    ("k7-on-3x7-fp32-pad0", *_case(_wgrad(A1), n=1, spatial=(9, 13), filter=(3, 7), padding=(1, 0))),
    ("3x3-fp16-14x14", *_case(_wgrad({**A8, "block_k": 3}), spatial=(14, 14), filter=(3, 3), padding=1)),
    ("5x5-fp16-13x11-w2-s2", *_case(_wgrad({**A8, "block_k": 5, "block_n": 8, "num_warps": 2,
                                            "num_stages": 2}), spatial=(13, 11), filter=(5, 5), padding=2)),
]


def _cases_configs(items) -> list[ConvConfig]:
    """The instances of the selected cases among `items`."""
    params = [getattr(getattr(item, "callspec", None), "params", {}) for item in items]
    return list(dict.fromkeys(p["cfg"] for p in params if "cfg" in p))


@pytest.fixture(scope="module")
def registry(request, build_registry):
    """The instances of the session's selected cases (every direction), compiled in one pool; launch plans for
    SMS SMs."""
    module = request.module
    return build_registry(_cases_configs([item for item in request.session.items if item.module is module]),
                          sms=SMS)


def _check(registry, cfg, problem):
    return assert_case(registry, cfg, problem, ARCH)


def _check_against_torch(registry, cfg, problem):
    """The reference of run_and_validate, and (symmetric padding) torch's own dgrad / wgrad in float64."""
    return assert_case(registry, cfg, problem, ARCH, against_torch=True)


@pytest.mark.parametrize("cfg, problem", [c[1:] for c in FAST], ids=[c[0] for c in FAST])
def test_matches_reference(registry, cfg, problem):
    _check(registry, cfg, problem)


@pytest.mark.slow
@pytest.mark.parametrize("cfg, problem", [c[1:] for c in SLOW], ids=[c[0] for c in SLOW])
def test_matches_reference_more_shapes(registry, cfg, problem):
    _check(registry, cfg, problem)


@pytest.mark.parametrize("cfg, problem", [c[1:] for c in FAST_BWD], ids=[c[0] for c in FAST_BWD])
def test_bwd_data_matches_reference(registry, cfg, problem):
    _check_against_torch(registry, cfg, problem)


@pytest.mark.slow
@pytest.mark.parametrize("cfg, problem", [c[1:] for c in SLOW_BWD], ids=[c[0] for c in SLOW_BWD])
def test_bwd_data_matches_reference_more_shapes(registry, cfg, problem):
    _check_against_torch(registry, cfg, problem)


@pytest.mark.parametrize("cfg, problem", [c[1:] for c in FAST_WGRAD], ids=[c[0] for c in FAST_WGRAD])
def test_bwd_weight_matches_reference(registry, cfg, problem):
    _check_against_torch(registry, cfg, problem)


def test_wgrad_row_chunks():
    """The fast 7x7 case walks several row blocks per program over several row chunks (not one block each)."""
    _, cfg, problem = FAST_WGRAD[0]
    plan = conv_halo.launch_plan(cfg, problem, SMS)
    # 13 rows: 7 blocks of 2 in 2 chunks of 4 blocks; splits = 2 images x 2 chunks x 2 strips of 8 columns
    assert dict(plan.scalars) == {"ROWS": 8, "SPLIT": 2 * 2 * 2}


@pytest.mark.slow
@pytest.mark.parametrize("cfg, problem", [c[1:] for c in SLOW_WGRAD], ids=[c[0] for c in SLOW_WGRAD])
def test_bwd_weight_matches_reference_more_shapes(registry, cfg, problem):
    _check_against_torch(registry, cfg, problem)


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
def test_name_round_trips_and_routes_to_its_module(direction):
    cfg = ConvConfig(**{**A8, "direction": direction, "dtype": "bf16", "block_m": 4, "block_n": 64,
                        "num_warps": 4})
    assert parse_name(cfg.name) == cfg and "-4x64x7-" in cfg.name and "-halo-" in cfg.name
    assert f"-{direction}-" in cfg.name
    assert family_module(cfg) is conv_halo
    assert config_errors(cfg, ARCH) == []


@pytest.mark.parametrize("change, field", [
    ({"direction": "bwd_weight", "block_k": 9}, "block_k"),
    ({"direction": "bwd_weight", "split_k": 2}, "split_k"),
    ({"direction": "bwd_weight", "block_m": 8, "block_n": 64}, "num_warps"),
    ({"ndim": 3}, "ndim"), ({"block_k": 6}, "block_k"),
    # 8 x 64 / 32 = 16 values per thread x (8 columns + 7 weights)
    ({"block_m": 8, "block_n": 64}, "num_warps"), ({"family": "igemm"}, "kloop")])
def test_rules(change, field):
    errors = dict(config_errors(ConvConfig(**{**A8, **change}), ARCH))
    assert field in errors, errors


@pytest.mark.parametrize("geometry, reason", [
    ({"filter": (7, 7)}, None), ({"filter": (9, 7)}, None), ({"filter": (7, 9)}, "filter"),
    ({"filter": (7, 7), "stride": (1, 3)}, "stride"), ({"filter": (7, 7), "dilation": (1, 2)}, "dilation"),
    ({"filter": (7, 7), "groups": 12}, "c_per_group")])
def test_problem_mismatch(geometry, reason):
    """Any filter height (a run-time loop), widths up to block_k, stride 1 or 2 and dilation 1 along W."""
    problem = td.ConvProblem("fwd", 1, 24, 24, geometry.pop("groups", 24), (14, 14), padding=3, dtype="fp16",
                             **geometry)
    found = problem_mismatch(ConvConfig(**A8), problem)
    assert (found is None) if reason is None else found.startswith(reason), found


@pytest.mark.parametrize("geometry, reason", [
    ({}, None), ({"dilation": (3, 1)}, None), ({"stride": (1, 2)}, "stride"), ({"stride": (2, 1)}, "stride"),
    ({"filter": (7, 9)}, "filter"), ({"dilation": (1, 2)}, "dilation"), ({"groups": 12}, "c_per_group")])
def test_bwd_data_problem_mismatch(geometry, reason):
    """bwd_data: stride 1 only (its one entry), any filter height and dilation along H."""
    problem = td.ConvProblem("bwd_data", 1, 24, 24, geometry.pop("groups", 24), (14, 14),
                             geometry.pop("filter", (7, 7)), padding=3, dtype="fp16", **geometry)
    found = problem_mismatch(ConvConfig(**_dgrad(A8)), problem)
    assert (found is None) if reason is None else found.startswith(reason), found


@pytest.mark.parametrize("geometry, reason", [
    ({}, None), ({"dilation": (3, 1)}, None), ({"filter": (5, 3)}, None), ({"stride": (1, 2)}, "stride"),
    ({"stride": (2, 1)}, "stride"), ({"filter": (7, 9)}, "filter"), ({"dilation": (1, 2)}, "dilation"),
    ({"groups": 12}, "c_per_group")])
def test_bwd_weight_problem_mismatch(geometry, reason):
    """bwd_weight: stride 1 only (its one entry), any filter height and dilation along H."""
    problem = td.ConvProblem("bwd_weight", 1, 24, 24, geometry.pop("groups", 24), (14, 14),
                             geometry.pop("filter", (7, 7)), padding=3, dtype="fp16", **geometry)
    found = problem_mismatch(ConvConfig(**_wgrad(A8)), problem)
    assert (found is None) if reason is None else found.startswith(reason), found


def test_bwd_weight_launches_its_splits_and_the_reduce():
    cfg = ConvConfig(**_wgrad(A8))
    assert [e.fn for e in conv_halo.entries(cfg)] == [
        "conv_halo_wgrad_kernel", "conv_direct_wgrad_reduce_kernel", "conv_direct_wgrad_reduce_kernel_tall"]
    # dy 13 x 11: 4 row blocks of 4, 2 strips of 8 columns, 2 images, 2 channel tiles of 16 -> 8 programs
    # per row chunk; 1 SM x 8 programs: one chunk of all 16 rows
    problem = td.ConvProblem("bwd_weight", 2, 24, 24, 24, (13, 11), (7, 7), padding=3, dtype="fp16")
    plan = conv_halo.launch_plan(cfg, problem, 1)
    assert plan.grids[0] == (2 * 2 * 2, 1, 1)
    assert dict(plan.scalars) == {"ROWS": 16, "SPLIT": 2 * 2}
    assert plan.workspaces == (("ws_ptr", 4 * 49 * 24, "fp32"),)
    # 132 SMs: a chunk per row block, each a split
    plan = conv_halo.launch_plan(cfg, problem, 132)
    assert plan.grids[0] == (4 * 2 * 2 * 2, 1, 1) and dict(plan.scalars) == {"ROWS": 4, "SPLIT": 16}
    # 7 accumulator tiles; a stage holds the 14 halo columns and 8 dy tiles of 4x16 fp16
    staged = dataclasses.replace(cfg, num_stages=2)
    assert conv_halo.resources(staged).shared_memory == (14 + 8) * 4 * 16 * 2
    assert conv_halo.resources(staged).accumulators == 7 * 4 * 16 // 32


def test_bwd_data_launches_its_entry_over_dx():
    cfg = ConvConfig(**_dgrad(A8))
    assert [e.fn for e in conv_halo.entries(cfg)] == ["conv_direct_wpack_kernel", "conv_halo_dgrad_kernel"]
    # dx 13 x 11 (dy 9 x 7 without padding): 4 row blocks of 4 x 2 strips of 8 columns, x 2 images x 2
    # channel tiles of 16
    problem = td.ConvProblem("bwd_data", 2, 24, 24, 24, (13, 11), (5, 5), padding=0, dtype="fp16")
    plan = conv_halo.launch_plan(cfg, problem, 132)
    assert plan.grids == ((-(-25 * 24 // 512), 1, 1), (4 * 2 * 2 * 2, 1, 1))
    assert plan.workspaces == (("ws_ptr", 25 * 24, "fp32"),)
    # its one entry loads the stride-1 halo: 8 - 1 + 7 columns of 4x16 fp16 and 7 fp32 weight vectors
    staged = dataclasses.replace(cfg, num_stages=2)
    assert conv_halo.resources(staged).shared_memory == 14 * 4 * 16 * 2 + 7 * 16 * 4


def test_launch_picks_the_entry_of_the_stride_along_w():
    cfg = ConvConfig(**A8)
    assert [e.fn for e in conv_halo.entries(cfg)] == ["conv_direct_wpack_kernel", "conv_halo_fwd_s1_kernel",
                                                      "conv_halo_fwd_s2_kernel"]
    problem = td.ConvProblem("fwd", 2, 24, 24, 24, (13, 11), (7, 7), stride=(1, 2), padding=3, dtype="fp16")
    plan = conv_halo.launch_plan(cfg, problem, 132)
    # output 13 x 6: 4 row blocks of 4 x 1 strip of 8 columns, x 2 images x 2 channel tiles of 16
    assert plan.grids == ((-(-49 * 24 // 512), 1, 1), (0, 1, 1), (4 * 1 * 2 * 2, 1, 1))
    assert plan.workspaces == (("ws_ptr", 49 * 24, "fp32"),)


def test_resources():
    cfg = ConvConfig(**{**A8, "dtype": "bf16", "block_n": 64, "num_warps": 4, "num_stages": 2})
    held = conv_halo.resources(cfg)
    assert held.accumulators == 8 * 2
    # one stage of the stride-2 entry's 7 * 2 + 7 halo columns of 4x64 bf16 and 7 fp32 weight vectors
    assert held.shared_memory == 21 * 4 * 64 * 2 + 7 * 64 * 4
    assert conv_halo.resources(dataclasses.replace(cfg, num_stages=1)).shared_memory == 0


def _ends(configs: list) -> list:
    """Per direction, the instances at each end of the tile's rows, channels and warps: the smallest with the
    fewest pipeline stages, the largest with the most (15 of the 54 bf16 7x7 instances, every entry's code
    path; compiling all 54 took two minutes of the slow lane on two cores)."""
    picked: list = []
    for direction in dict.fromkeys(cfg.direction for cfg in configs):
        mine = [cfg for cfg in configs if cfg.direction == direction]
        stages = [cfg.num_stages for cfg in mine]
        for field in ("block_m", "block_n", "num_warps"):
            values = [getattr(cfg, field) for cfg in mine]
            for value, stage in ((min(values), min(stages)), (max(values), max(stages))):
                cfg = next(c for c in mine if getattr(c, field) == value and c.num_stages == stage)
                if cfg not in picked:
                    picked.append(cfg)
    return picked


def _halo7_registry(load_script) -> td.Registry:
    """The bf16 instances of tools/probe_halo7.py at the ends of their tile space (_ends), every direction,
    for sm_90."""
    probe = load_script("tools/probe_halo7.py")
    reg = td.Registry("sm_90")
    configs = [cfg for d in probe.HALO7_DIRECTIONS for cfg in probe.halo7_configs(reg.arch, direction=d)]
    for cfg in _ends(configs):
        reg.add(cfg)
    return reg


def prebuild_registries(items, load_script):
    """(tests/conftest.py) The selected cases' instances, and the 7x7 instances (15 compiles) when
    test_7x7_instances_compile_for_sm90 runs."""
    wanted = any(item.name == "test_7x7_instances_compile_for_sm90" for item in items)
    return [_cases_configs(items), *([_halo7_registry(load_script)] if wanted else [])]


@pytest.mark.slow
def test_7x7_instances_compile_for_sm90(load_script, prebuild):
    """The bf16 instances of tools/probe_halo7.py at the ends of their tile space (every direction), compiled
    for sm_90 without a GPU (those that the session's prebuild worker has not compiled yet)."""
    prebuild.claim(__name__)
    reg = _halo7_registry(load_script)
    assert {kernel.config.direction for kernel in reg.kernels} == {"fwd", "bwd_data", "bwd_weight"}
    assert {kernel.config.num_warps for kernel in reg.kernels} == {1, 4, 8} and len(reg.kernels) == 15
    report = reg.build(max_workers=2)
    assert not report.failed, report.failed
