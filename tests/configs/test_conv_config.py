"""ConvConfig: name round trip (every field), from_dict, and the validity predicate's errors by field."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tiledispatch as td
from tiledispatch.configs.conv import CONV_FAMILIES, KLOOPS, ConvConfig
from tiledispatch.kernels.family import check_config, config_errors, problem_mismatch
from tiledispatch.problems.gemm import ACTIVATIONS

ARCH = td.get_arch("sm_90")


@st.composite
def any_conv_config(draw):
    """Field values from the legal vocabularies combined freely: the round trip must not need validity."""
    return ConvConfig(
        family=draw(st.sampled_from(CONV_FAMILIES)), direction=draw(st.sampled_from(("fwd", "bwd_data", "bwd_weight"))),
        ndim=draw(st.sampled_from((1, 2, 3))), dtype=draw(st.sampled_from(("fp16", "bf16", "fp32"))),
        block_m=draw(st.sampled_from((1, 16, 64, 256))), block_n=draw(st.sampled_from((8, 32, 128))),
        block_k=draw(st.sampled_from((1, 16, 64))), groups_per_program=draw(st.sampled_from((1, 2, 8))),
        num_warps=draw(st.sampled_from((1, 4, 8))), num_stages=draw(st.sampled_from((1, 2, 4))),
        split_k=draw(st.sampled_from((0, 1, 16))), kloop=draw(st.sampled_from(KLOOPS)),
        align=draw(st.sampled_from((1, 8))), activation=draw(st.sampled_from(ACTIVATIONS)),
        bias=draw(st.booleans()))


@settings(max_examples=200, deadline=None)
@given(any_conv_config())
def test_name_round_trips_every_field(cfg):
    assert td.parse_name(cfg.name) == cfg
    assert ConvConfig.from_dict(cfg.to_dict()) == cfg


def test_name_changes_with_every_field():
    base = ConvConfig()
    changed = {"family": "direct", "direction": "bwd_data", "ndim": 3, "dtype": "fp16", "out_dtype": "fp32",
               "block_m": 64, "block_n": 128, "block_k": 64, "groups_per_program": 4, "num_warps": 8,
               "num_stages": 3, "split_k": 8, "kloop": "flat", "align": 1, "activation": "relu", "bias": True}
    assert set(changed) == {f.name for f in dataclasses.fields(ConvConfig) if f.name != "acc_dtype"}
    for field, value in changed.items():
        assert dataclasses.replace(base, **{field: value}).name != base.name, field


@pytest.mark.parametrize("name", ["conv-igemm-fwd-2d-bf16", "conv-igemm-up-2d-bf16-bf16-fp32-128x64x32-g1-w4-s2-k0-tap-a8-none-b0",
                                  "conv-igemm-fwd-2d-bf16-bf16-fp32-128x064x32-g1-w4-s2-k0-tap-a8-none-b0"])
def test_malformed_or_noncanonical_names_raise(name):
    with pytest.raises(td.InvalidConfig) as info:
        td.parse_name(name)
    assert info.value.field == "name"


def test_from_dict_names_an_unknown_field():
    with pytest.raises(td.InvalidConfig) as info:
        ConvConfig.from_dict({"family": "igemm", "tile": 3})
    assert info.value.field == "tile"


@pytest.mark.parametrize("changes, field", [
    ({"family": "winograd"}, "family"),
    ({"direction": "sideways"}, "direction"),
    ({"ndim": 4}, "ndim"),
    ({"dtype": "int8"}, "dtype"),
    ({"num_warps": 3}, "num_warps"),
    ({"align": 4}, "align"),
    ({"kloop": "spiral"}, "kloop"),
    ({"direction": "bwd_data", "bias": True}, "bias"),
    ({"family": "direct", "split_k": 8}, "split_k"),
    ({"family": "gemm", "direction": "bwd_weight"}, "split_k"),   # a 1x1 wgrad GEMM needs a fixed split
    ({"family": "gemm", "groups_per_program": 2}, "groups_per_program"),
    # 3 pipelined stages of a 256x64 tile with 7 filter columns unrolled: 2 x 7 x 32 KB of buffers > 227 KB
    ({"family": "direct", "block_m": 256, "block_k": 7, "num_warps": 8, "num_stages": 3, "block_n": 64},
     "num_stages"),
])
def test_validity_names_the_offending_field(changes, field):
    cfg = dataclasses.replace(ConvConfig(), **changes)
    assert field in {f for f, _ in config_errors(cfg, ARCH)}
    with pytest.raises(td.InvalidConfig):
        check_config(cfg, ARCH)
    with pytest.raises(td.InvalidConfig):
        td.Registry("sm_90").add(cfg)


@pytest.mark.parametrize("problem_changes, field", [
    ({"direction": "bwd_data"}, "direction"),
    ({"spatial": (9,), "filter": (1,)}, "ndim"),
    ({"dtype": "fp16"}, "dtype"),
    ({"bias": True}, "bias"),
    ({"activation": "relu"}, "activation"),
    ({"c": 12}, "align"),
    ({"filter": (3, 3)}, "filter"),
    ({"stride": 2}, "stride"),
    ({"padding": ((0, 1), (0, 0))}, "padding"),
    ({"groups": 2}, "groups"),
])
def test_gemm_family_mismatch_names_the_field(problem_changes, field):
    cfg = ConvConfig(family="gemm", block_m=64, block_n=64, block_k=32)
    base = dict(direction="fwd", n=2, c=16, k=32, groups=1, spatial=(9, 9), filter=(1, 1), dtype="bf16")
    problem = td.ConvProblem(**{**base, **problem_changes})
    reason = problem_mismatch(cfg, problem)
    assert reason is not None and reason.startswith(field), reason
    assert problem_mismatch(cfg, td.ConvProblem(**base)) is None


@pytest.mark.parametrize("field, value", [("block_m", 64.0), ("ndim", 2.0), ("split_k", False),
                                          ("align", "8"), ("kloop", None), ("bias", 0.0), ("direction", 1)])
def test_fields_refuse_other_types(field, value):
    """D7: float tile sizes passed validity and broke the name round trip."""
    with pytest.raises(td.InvalidConfig) as info:
        ConvConfig(**{field: value})
    assert info.value.field == field


def test_numpy_integers_become_ints():
    import numpy as np

    cfg = ConvConfig(block_m=np.int64(64), ndim=np.int8(2))
    assert type(cfg.block_m) is int and td.parse_name(cfg.name) == cfg == ConvConfig(block_m=64)
