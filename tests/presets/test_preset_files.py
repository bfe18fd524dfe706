"""Packaged presets: listing, loading, unknown names, what the essential sets must contain."""
from __future__ import annotations

import pytest

import tiledispatch as td
from tiledispatch.presets import list_presets, load_preset, preset_info

ESSENTIAL = [p for p in list_presets() if p.endswith("_essential") and p.startswith("gemm_")]


def test_list_presets_is_sorted_and_public():
    assert td.list_presets() == list_presets() == sorted(list_presets())


@pytest.mark.parametrize("name", ["gemm_fp64_rcr_essential", "gemm_fp16_rcr", "", "../arch/specs"])
def test_unknown_preset_raises_invalid_config(name):
    with pytest.raises(td.InvalidConfig) as info:
        load_preset(name)
    assert info.value.field == "preset" and "gemm_fp16_rcr_essential" in str(info.value)
    with pytest.raises(td.InvalidConfig):
        td.Registry("sm_90").add_preset(name)


# Combos whose presets were derived from GPU sweeps of the candidates (tools/derive_presets.py).
MEASURED = ("bf16_rcr", "bf16_rrr", "fp16_rcr", "fp16_rrr", "fp8e4m3_rcr")
MEASURED_KINDS = ("essential", "compute", "memory", "latency")


@pytest.mark.parametrize("preset", ESSENTIAL)
def test_essential_presets_are_self_consistent_and_cover_every_shape(preset):
    _, dtype, layout, _ = preset.split("_")
    info = preset_info(preset)
    assert info["name"] == preset and info["op"] == "gemm"
    configs = load_preset(preset)
    assert {(c.dtype, c.layout) for c in configs} == {(dtype, layout)}
    assert all(c.epilogue.is_identity for c in configs)   # epilogues are applied by add_preset(name, epilogue)
    if f"{dtype}_{layout}" in MEASURED:
        assert 8 <= len(configs) <= 40
        assert {c.family for c in configs} & {"tma_persistent", "tma_ws", "streamk"}
        return
    assert 10 <= len(configs) <= 40
    assert {c.family for c in configs} == {"tiled", "splitk"}
    assert {c.align for c in configs} == {1, 16}, "a1 fallbacks run unaligned shapes without padding"


@pytest.mark.parametrize("combo", MEASURED)
@pytest.mark.parametrize("kind", MEASURED_KINDS)
def test_measured_presets_are_subsets_of_the_swept_candidates(combo, kind):
    """Each measured preset only lists instances that the sweep timed (the candidates) and names its data."""
    candidates = {c.name for c in load_preset(f"gemm_{combo}_candidates")}
    configs = load_preset(f"gemm_{combo}_{kind}")
    assert configs and {c.name for c in configs} <= candidates
    assert f"sweep_{combo}_h200.json" in preset_info(f"gemm_{combo}_{kind}")["description"]


@pytest.mark.parametrize("preset", [p for p in list_presets() if p.endswith("_all") and p.startswith("gemm_")][:4])
def test_all_presets_are_spaces(preset):
    space = preset_info(preset)["space"]
    assert set(space["families"]) == {"tiled", "splitk"} and space["arch"] == "sm_90"
    assert len(load_preset(preset)) > 1000


def test_add_preset_applies_the_epilogue():
    registry = td.Registry("sm_90")
    epi = td.Epilogue("relu", "col")
    kernels = registry.add_preset("gemm_bf16_crr_essential", epi)
    assert kernels and all(k.config.epilogue == epi for k in kernels) and len(registry) == len(kernels)
    assert not any(k.built for k in kernels)


@pytest.mark.parametrize(("preset", "space"), [
    ("gemm_bf16_rcr_essential", "gemm_bf16_rcr_candidates"),   # the sweeps' (and the models') space
    ("gemm_fp8e4m3_rcr_essential", "gemm_fp8e4m3_rcr_candidates"),
    ("gemm_fp32_rcr_essential", "gemm_fp32_rcr_all"),
    ("conv_fwd_bf16_2d_essential", "conv_fwd_bf16_2d_all"),
    ("gemm_bf16_rcr_compute", None),
    ("gemm_bf16_rcr_candidates", None),
])
def test_the_space_of_an_essential_preset(preset, space):
    from tiledispatch.presets import space_of

    assert space_of(preset) == space


def test_every_essential_preset_has_a_space():
    from tiledispatch.presets import space_of

    assert all(space_of(p) in list_presets() for p in list_presets() if p.endswith("_essential"))
