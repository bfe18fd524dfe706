"""kloop 'halofh' (kernels/conv_halo_fh.py: depthwise 2-D bwd_weight with the filter rows in the tile): the
interpreter vs the float64 reference and torch.nn.grad.conv2d_weight on 7x7, 5x5 and 3x3 layers of odd sizes
and channel counts, its rules, launch plan and name."""
from __future__ import annotations

import dataclasses

import pytest

import tiledispatch as td
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.naming import parse_name
from tiledispatch.kernels import conv_halo_fh
from tiledispatch.kernels.family import config_errors, family_module, problem_mismatch
from tiledispatch.testing.reference import assert_case

ARCH = td.get_arch("sm_90")
# fp16 align 8 (40 channels: a half-masked second channel tile of 32), fp32 align 1 (odd channel counts);
# strip 7 (block_m), FH 8 (block_k 7); 1 warp keeps the interpreter's programs few: 8 x 16 / 32 = 4 values
# per thread
A8 = {"family": "direct", "kloop": "halofh", "direction": "bwd_weight", "dtype": "fp16", "block_m": 7,
      "block_n": 32, "block_k": 7, "num_warps": 1, "num_stages": 1, "align": 8}
A1 = {**A8, "dtype": "fp32", "block_n": 16, "align": 1}
# Launch plans for SMS SMs, so that the cases' programs take several row chunks (test_row_chunks)
SMS = 2


def _case(fields, c, n=2, **geometry):
    cfg = ConvConfig(**fields)
    return cfg, td.ConvProblem("bwd_weight", n, c, c, c, dtype=cfg.dtype, **geometry)


# (id, cfg, problem): widths that leave the last strip partial, channel counts that leave the last channel
# tile partial; FH 8 over 7-, 5- and 3-row filters (block_k 7 / 5), FH 4 over a 3x3 one (block_k 3)
FAST = [
    ("7x7-fp16-9x11-c40", *_case(A8, 40, spatial=(9, 11), filter=(7, 7), padding=3)),
    ("5x5-fp32-11x9-c37-strip8", *_case({**A1, "block_k": 5, "block_m": 8}, 37, spatial=(11, 9),
                                       filter=(5, 5), padding=2)),
    ("3x3-fp32-7x7-c5-dil-h2", *_case({**A1, "block_k": 3, "block_m": 4, "block_n": 8}, 5, spatial=(7, 7),
                                      filter=(3, 3), dilation=(2, 1), padding=1)),
]
SLOW = [
    ("7x7-fp32-7x7-c3-n1", *_case({**A1, "block_m": 8, "block_n": 8}, 3, n=1, spatial=(7, 7), filter=(7, 7),
                                  padding=3)),
    ("7x7-fp16-13x11-asym", *_case(A8, 24, spatial=(13, 11), filter=(7, 7), padding=((3, 2), (3, 2)))),
    ("k7-on-5x5-fp16-9x13", *_case({**A8, "block_m": 14}, 24, n=1, spatial=(9, 13), filter=(5, 5),
                                   padding=2)),
    ("k7-on-3x7-fp32-pad0-w2", *_case({**A1, "num_warps": 2, "block_m": 16}, 9, spatial=(9, 13),
                                      filter=(3, 7), padding=(1, 0))),
    ("5x5-fp32-9x11-c11-dil-h2-s2", *_case({**A1, "block_k": 5, "num_stages": 2}, 11, spatial=(9, 11),
                                           filter=(5, 5), dilation=(2, 1), padding=(4, 2))),
    ("3x3-fp16-11x9-split2", *_case({**A8, "block_k": 3, "block_m": 8, "block_n": 16, "split_k": 2}, 24,
                                    spatial=(11, 9), filter=(3, 3), padding=1)),
]


def _cases_configs(items) -> list[ConvConfig]:
    params = [getattr(getattr(item, "callspec", None), "params", {}) for item in items]
    return list(dict.fromkeys(p["cfg"] for p in params if "cfg" in p))


@pytest.fixture(scope="module")
def registry(request, build_registry):
    """The instances of the session's selected cases, compiled in one pool; launch plans for SMS SMs."""
    module = request.module
    return build_registry(_cases_configs([item for item in request.session.items if item.module is module]),
                          sms=SMS)


CASES = ([pytest.param(*c[1:], id=c[0]) for c in FAST]
         + [pytest.param(*c[1:], id=c[0], marks=pytest.mark.slow) for c in SLOW])


@pytest.mark.parametrize("cfg, problem", CASES)
def test_matches_reference(registry, cfg, problem):
    """run_and_validate's float64 reference, then (symmetric padding) torch's own wgrad in float64."""
    assert_case(registry, cfg, problem, ARCH, against_torch=True)


def test_row_chunks():
    """The fast 7x7 case: several dy rows per program, over several row chunks, the last one cut."""
    _, cfg, problem = FAST[0]
    # 2 images x 2 strips of 7 columns x 2 channel tiles = 8 programs per chunk; 2 SMs x 8 programs: 2 chunks
    # of 5 of the 9 rows (5 + 4)
    plan = conv_halo_fh.launch_plan(cfg, problem, SMS)
    assert dict(plan.scalars) == {"ROWS": 5, "SPLIT": 2 * 2 * 2}
    assert plan.grids[0] == (8 * 2, 1, 1)
    assert plan.workspaces == (("ws_ptr", 8 * 49 * 40, "fp32"),)


def test_split_k_sets_the_programs_per_sm():
    """split_k p > 0: the row plan aims for p programs per SM instead of conv_direct.PROGRAMS_PER_SM."""
    cfg = ConvConfig(**{**A8, "dtype": "bf16", "block_n": 64, "num_warps": 4})
    problem = td.ConvProblem("bwd_weight", 32, 768, 768, 768, (7, 7), (7, 7), padding=3, dtype="bf16")
    # 32 images x 1 strip x 12 channel tiles = 384 programs per chunk: 132 x 8 -> 3 chunks of 3 rows
    assert conv_halo_fh.rows_plan(cfg, problem, 132) == (3, 3)
    assert conv_halo_fh.rows_plan(dataclasses.replace(cfg, split_k=2), problem, 132) == (7, 1)
    assert conv_halo_fh.launch_plan(dataclasses.replace(cfg, split_k=2), problem, 132).scalars == (
        ("ROWS", 7), ("SPLIT", 32))


def test_name_round_trips_and_routes_to_its_module():
    cfg = ConvConfig(**{**A8, "dtype": "bf16", "block_n": 64, "num_warps": 4})
    assert cfg.name == "conv-direct-bwd_weight-2d-bf16-bf16-fp32-7x64x7-g1-w4-s1-k0-halofh-a8-none-b0"
    assert parse_name(cfg.name) == cfg
    assert family_module(cfg) is conv_halo_fh
    assert config_errors(cfg, ARCH) == []
    assert [e.fn for e in conv_halo_fh.entries(cfg)] == [
        "conv_halofh_wgrad_kernel", "conv_direct_wgrad_reduce_kernel", "conv_direct_wgrad_reduce_kernel_tall"]
    assert conv_halo_fh.filter_rows(cfg) == 8
    assert conv_halo_fh.filter_rows(dataclasses.replace(cfg, block_k=3)) == 4


@pytest.mark.parametrize("change, field", [
    ({"direction": "fwd"}, "direction"), ({"ndim": 3}, "ndim"), ({"block_k": 4}, "block_k"),
    ({"block_m": 5}, "block_m"), ({"groups_per_program": 2}, "groups_per_program"),
    # 8 x 64 / 32 = 16 values per thread x 7 accumulators; 8 x 16 / 256 < 1
    ({"block_n": 64}, "num_warps"), ({"block_n": 16, "num_warps": 8}, "num_warps"),
    ({"family": "igemm"}, "kloop")])
def test_rules(change, field):
    errors = dict(config_errors(ConvConfig(**{**A8, **change}), ARCH))
    assert field in errors, errors


@pytest.mark.parametrize("geometry, reason", [
    ({}, None), ({"dilation": (3, 1)}, None), ({"filter": (8, 5)}, None), ({"filter": (9, 7)}, "filter"),
    ({"filter": (7, 9)}, "filter"), ({"stride": (1, 2)}, "stride"), ({"stride": (2, 1)}, "stride"),
    ({"dilation": (1, 2)}, "dilation"), ({"groups": 12}, "c_per_group")])
def test_problem_mismatch(geometry, reason):
    """Stride 1, dilation 1 along W, filters up to FH (8) x block_k (7)."""
    problem = td.ConvProblem("bwd_weight", 1, 24, 24, geometry.pop("groups", 24), (14, 14),
                             geometry.pop("filter", (7, 7)), padding=3, dtype="fp16", **geometry)
    found = problem_mismatch(ConvConfig(**A8), problem)
    assert (found is None) if reason is None else found.startswith(reason), found


def test_resources():
    cfg = ConvConfig(**{**A8, "num_stages": 2})
    held = conv_halo_fh.resources(cfg)
    assert held.accumulators == 7 * 8 * 32 // 32
    # one stage: 13 halo columns of [8, 32] fp16 and the 7 dy vectors of 32
    assert held.shared_memory == (13 * 8 + 7) * 32 * 2
    assert conv_halo_fh.resources(dataclasses.replace(cfg, num_stages=1)).shared_memory == 0
