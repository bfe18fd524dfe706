"""ArchSpec: one JSON file of arch facts, normalised names, detection without a GPU."""
from __future__ import annotations

import dataclasses
import json
from importlib import resources

import pytest
import torch

import tiledispatch as td
from tiledispatch.arch.spec import known_archs, normalize_arch

REQUIRED = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_100")


def test_specs_json_has_every_required_arch_and_field():
    table = json.loads(resources.files("tiledispatch.arch").joinpath("specs.json").read_text())["archs"]
    assert set(REQUIRED) <= set(table)
    fields = {f.name for f in dataclasses.fields(td.ArchSpec)} - {"name"}
    for arch, row in table.items():
        assert set(row) == fields, arch
        spec = td.get_arch(arch)
        assert spec.smem_per_block <= spec.smem_per_sm
        assert spec.max_warps_per_block <= spec.max_warps_per_sm
        assert spec.sm_count > 0 and spec.peak_tflops_fp16 > 0 and spec.hbm_gbps > 0
        assert {"fp16", "bf16", "fp32", "int8"} <= set(spec.dtypes)


def test_hopper_facts():
    h = td.get_arch("sm_90")
    assert h.cc == 90 and h.tma and h.wgmma and h.fp8
    assert not td.get_arch("sm_80").wgmma and not td.get_arch("sm_86").fp8


@pytest.mark.parametrize("spelling", ["sm_90", "sm90", "90", 90, "SM_90", "sm_90a", "90a"])
def test_normalize_accepts_common_spellings(spelling):
    assert normalize_arch(spelling) == "sm_90"
    assert td.get_arch(spelling).name == "sm_90"


@pytest.mark.parametrize("bad", ["sm_75", "sm_91", "hopper", "", 70])
def test_unknown_gpu_target_is_bad_input(bad):
    with pytest.raises(td.BadInput) as info:
        td.get_arch(bad)
    assert info.value.field == "gpu_target"
    for arch in known_archs():
        assert repr(arch) in str(info.value)


def test_registry_with_unknown_target_is_bad_input():
    with pytest.raises(td.BadInput) as info:
        td.Registry("sm_75")
    assert info.value.field == "gpu_target"


@pytest.mark.skipif(torch.cuda.is_available(), reason="detection without a GPU")
def test_detect_without_gpu_uses_the_configured_default(monkeypatch):
    assert td.detect().name == "sm_90"
    monkeypatch.setenv("TILEDISPATCH_ARCH", "sm_86")
    assert td.detect().name == "sm_86"
    monkeypatch.setenv("TILEDISPATCH_ARCH", "sm_75")
    with pytest.raises(td.BadInput):
        td.detect()


def test_with_device_keeps_the_arch_and_replaces_the_count():
    spec = td.get_arch("sm_90").with_device(114, "H100 PCIe")
    assert spec.name == "sm_90" and spec.sm_count == 114 and spec.reference_gpu == "H100 PCIe"
    assert td.get_arch("sm_90").sm_count == 132
