"""name <-> config: every packaged preset config round-trips; malformed names raise InvalidConfig."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tiledispatch as td
from tiledispatch.configs.gemm import GEMM_FAMILIES
from tiledispatch.presets import list_presets, load_preset

PRESETS = list_presets()


def test_packaged_presets_cover_essential_and_all_spaces():
    assert len(PRESETS) >= 40
    assert sum(p.endswith("_all") for p in PRESETS) >= 20
    for dtype in ("fp16", "bf16", "fp32", "tf32", "int8"):
        for layout in ("rcr", "rrr", "crr", "ccr"):
            assert f"gemm_{dtype}_{layout}_essential" in PRESETS
            assert f"gemm_{dtype}_{layout}_all" in PRESETS


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_config_round_trips(preset):
    configs = load_preset(preset)
    assert configs, preset
    names = set()
    for cfg in configs:
        name = cfg.name
        assert td.parse_name(name) == cfg, name
        names.add(name)
    assert len(names) == len(configs), f"{preset} lists a config twice"


@st.composite
def any_config(draw):
    """Field values from the legal vocabularies, combined freely (round trip must not need validity)."""
    dtype = draw(st.sampled_from(["fp16", "bf16", "fp32", "tf32", "int8", "fp8e4m3"]))
    return td.GemmConfig(
        family=draw(st.sampled_from(list(GEMM_FAMILIES))), layout=draw(st.sampled_from(["rcr", "rrr", "crr", "ccr"])),
        dtype=dtype, out_dtype=draw(st.sampled_from(["", "fp16", "bf16", "fp32", "int32"])),
        block_m=draw(st.sampled_from([16, 32, 64, 128, 256])), block_n=draw(st.sampled_from([16, 32, 64, 128, 256])),
        block_k=draw(st.sampled_from([16, 32, 64, 128, 256])), num_warps=draw(st.sampled_from([1, 2, 4, 8, 16])),
        num_stages=draw(st.integers(1, 6)), group_m=draw(st.sampled_from([1, 2, 4, 8, 16])),
        split_k=draw(st.sampled_from([1, 2, 3, 4, 16, 64])), subtile=draw(st.sampled_from([1, 2])), align=draw(st.sampled_from([1, 16])),
        activation=draw(st.sampled_from(["none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"])),
        bias=draw(st.sampled_from(["none", "row", "col"])), num_d=draw(st.integers(0, 2)),
        with_c=draw(st.booleans()))


@settings(max_examples=200, deadline=None)
@given(any_config())
def test_round_trip_of_arbitrary_field_combinations(cfg):
    assert td.parse_name(cfg.name) == cfg


def test_name_carries_every_field():
    """Changing any field changes the name (a name never hides a code-changing field)."""
    base = td.GemmConfig()
    other = {"family": "splitk", "layout": "crr", "dtype": "bf16", "out_dtype": "fp32", "acc_dtype": "int32",
             "block_m": 64, "block_n": 64, "block_k": 64, "num_warps": 8, "num_stages": 4, "group_m": 4,
             "split_k": 4, "subtile": 2, "align": 1, "activation": "relu", "bias": "row", "num_d": 1,
             "with_c": True}
    fields = {f.name for f in dataclasses.fields(td.GemmConfig)}
    assert set(other) == fields
    names = {base.name}
    for field, value in other.items():
        changed = dataclasses.replace(base, **{field: value})
        assert changed.name not in names, field
        names.add(changed.name)
        assert td.parse_name(changed.name) == changed


GOOD = td.GemmConfig().name


@pytest.mark.parametrize("name", [
    "", "gemm", "gemm-", "conv-fwd-" + GOOD[5:], GOOD[:-5], GOOD + "-x", GOOD.upper(), " " + GOOD, GOOD + "\n",
    GOOD.replace("128x128x32", "128x128"), GOOD.replace("-w4-", "-w-"), GOOD.replace("-c0", "-c2"),
    GOOD.replace("-w4-", "-w04-"), GOOD.replace("-s3-", "-s+3-"), GOOD.replace("-bnone-", "-none-"),
    GOOD.replace("gemm-tiled-", "gemm-tiled-x-"), GOOD.replace("-rcr-", "-rcx-"),
])
def test_malformed_names_raise_invalid_config(name):
    with pytest.raises(td.InvalidConfig) as info:
        td.parse_name(name)
    assert info.value.field == "name"


@pytest.mark.parametrize("value", [None, 42, td.GemmConfig()])
def test_non_string_names_raise_invalid_config(value):
    with pytest.raises(td.InvalidConfig) as info:
        td.parse_name(value)
    assert info.value.field == "name"


def test_non_canonical_name_reports_the_canonical_form():
    name = GOOD.replace("-w4-", "-w04-")
    with pytest.raises(td.InvalidConfig, match="canonical"):
        td.parse_name(name)
