"""Registry: declaring instances, lookup, support queries, selection errors."""
from __future__ import annotations

import pytest
import torch

import tiledispatch as td
from tiledispatch.testing import small_config, suites

PLAIN = small_config("tiled", "rcr", "fp16")
A16 = small_config("tiled", "rcr", "fp16", align=16)


def test_add_accepts_configs_and_names_and_deduplicates():
    registry = td.Registry("sm_90")
    k1 = registry.add(PLAIN)
    k2 = registry.add(PLAIN.name)
    assert k1 is k2 and len(registry) == 1 and registry.kernels == [k1] and list(registry) == [k1]
    assert registry.get(PLAIN.name) is k1 and k1.config == PLAIN and k1.instance_string() == PLAIN.name
    assert not k1.built and "not built" in repr(k1) and registry.arch.name == "sm_90"


def test_add_rejects_non_configs_and_invalid_configs():
    registry = td.Registry("sm_90")
    with pytest.raises(td.InvalidConfig) as info:
        registry.add(42)
    assert info.value.field == "config"
    with pytest.raises(td.InvalidConfig) as info:
        registry.add(small_config(block=(48, 32, 32)))
    assert info.value.field == "block_m"
    assert len(registry) == 0


def test_get_unknown_and_malformed_names():
    registry = td.Registry("sm_90")
    registry.add(PLAIN)
    with pytest.raises(td.NoKernelFound) as info:
        registry.get(A16.name)
    assert info.value.field == "kernel" and A16.name in str(info.value)
    with pytest.raises(td.InvalidConfig) as info:
        registry.get("gemm-not-a-name")
    assert info.value.field == "name"


@pytest.mark.parametrize("text", ["", "not json", "[]", '{"arch": "sm_90"}', '{"kernels": []}',
                                  '{"arch": "sm_90", "kernels": 5}', '{"arch": "sm_90", "kernels": "gemm"}', "null"])
def test_from_json_garbage_raises_invalid_config(text):
    with pytest.raises(td.InvalidConfig) as info:
        td.Registry.from_json(text)
    assert info.value.field == "registry"


def test_from_json_with_bad_entries():
    with pytest.raises(td.InvalidConfig) as info:
        td.Registry.from_json('{"arch": "sm_90", "kernels": ["gemm-garbage"]}')
    assert info.value.field == "name"
    with pytest.raises(td.BadInput) as info:
        td.Registry.from_json(f'{{"arch": "sm_75", "kernels": ["{PLAIN.name}"]}}')
    assert info.value.field == "gpu_target"


def test_kernel_support_says_why_not():
    kernel = td.Registry("sm_90").add(A16)
    ok = kernel.is_supported(td.GemmProblem(32, 32, 32, dtype="fp16"))
    assert ok and ok.ok and ok.reason == "" and tuple(ok) == (True, "")
    no = kernel.is_supported(td.GemmProblem(32, 32, 17, dtype="fp16"))
    assert not no and no.reason.startswith("align:")
    no = kernel.is_supported(td.GemmProblem(32, 32, 32, dtype="bf16"))
    assert not no and no.reason.startswith("dtype:")


def test_registry_support_includes_exact_padding():
    registry = td.Registry("sm_90")
    assert not registry.is_supported(td.GemmProblem(8, 8, 8)) and "empty" in registry.is_supported(
        td.GemmProblem(8, 8, 8)).reason
    registry.add(A16)
    assert registry.is_supported(td.GemmProblem(32, 32, 32, dtype="fp16"))
    assert registry.is_supported(td.GemmProblem(20, 24, 17, dtype="fp16")), "select pads it exactly"
    no = registry.is_supported(td.GemmProblem(32, 32, 32, dtype="bf16"))
    assert not no and "dtype" in no.reason


def test_select_errors(build_registry):
    unbuilt = td.Registry("sm_90")
    unbuilt.add(PLAIN)
    with pytest.raises(td.NoKernelFound) as info:
        unbuilt.select(td.GemmProblem(8, 8, 8, dtype="fp16"))
    assert info.value.field == "registry"
    with pytest.raises(td.NoKernelFound) as info:
        td.Registry("sm_90").select(td.GemmProblem(8, 8, 8, dtype="fp16"))
    registry = build_registry(suites.select_configs())
    with pytest.raises(td.UnsupportedProblem) as info:
        registry.select(td.GemmProblem(8, 8, 8, dtype="bf16"))
    assert info.value.field == "problem" and "dtype" in str(info.value) and "bf16" in str(info.value)
    with pytest.raises(td.BadInput) as info:
        registry.select(td.GemmProblem(8, 8, 8, dtype="fp16"), strategy="fastest")
    assert info.value.field == "strategy" and "'rules'" in str(info.value)


def test_unsupported_problem_from_tensors(build_registry):
    """A registry of fp16 kernels given bf16 tensors."""
    registry = build_registry(suites.select_configs())
    a = torch.randn(8, 16, dtype=torch.bfloat16)
    b = torch.randn(16, 8, dtype=torch.bfloat16).t().contiguous().t()
    with pytest.raises(td.UnsupportedProblem) as info:
        registry.run(None, a, b)
    assert info.value.field == "problem" and "bf16" in str(info.value)


def test_plans_pad_only_kernels_that_cannot_run_directly(build_registry):
    registry = build_registry(suites.aligned_configs())          # a16 tiled, a16 splitk, a16 with C, a1 tiled
    problem = td.GemmProblem(20, 24, 17, dtype="fp16")
    plans = registry.plans(problem)
    assert len({p.kernel.name for p in plans}) == len(plans), [p.label for p in plans]
    direct = [p for p in plans if not p.padded]
    padded = [p for p in plans if p.padded]
    assert [p.kernel.config.align for p in direct] == [1] and direct[0].problem == problem
    assert sorted(p.kernel.config.family for p in padded) == ["splitk", "tiled"]
    for p in padded:
        assert p.kernel.config.align == 16 and p.label.endswith("(padded)")
        # 16-byte fp16 rows: K 17 -> 24 (N=24 already is); rcr: M stays
        assert (p.problem.m, p.problem.n, p.problem.k, p.problem.align) == (20, 24, 24, 8)
    aligned = td.GemmProblem(32, 32, 32, dtype="fp16")
    assert not any(p.padded for p in registry.plans(aligned)) and len(registry.plans(aligned)) == 3
