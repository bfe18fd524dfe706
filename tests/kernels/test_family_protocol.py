"""The kernel-family protocol (kernels/family.py): every family module owns its rules, and the predicates answer
for both ops and for ill-formed configs without crashing."""
from __future__ import annotations

import dataclasses

import pytest

import tiledispatch as td
from tiledispatch.errors import InvalidConfig
from tiledispatch.kernels import family, rules
from tiledispatch.presets import load_preset

H100 = td.get_arch("sm_90")
PROTOCOL = ("entries", "render", "launch_plan", "config_errors", "problem_mismatch", "resources")
SAMPLES = [td.GemmConfig(family=f, dtype="bf16", num_warps=4, num_stages=3) for f in
           ("tiled", "splitk", "tma_persistent", "tma_ws", "streamk")]
SAMPLES += [td.GemmConfig(family="tma_ws", dtype="fp8e4m3", block_k=128)]
SAMPLES += [td.ConvConfig(family=f, direction=d, kloop=k) for f, k in
            (("igemm", "tap"), ("direct", "tap"), ("direct", "roll"), ("gemm", "tap"), ("gemm", "im2col"), ("tma", "tap"))
            for d in ("fwd", "bwd_data", "bwd_weight")]


@pytest.mark.parametrize("cfg", SAMPLES, ids=lambda c: c.name)
def test_every_family_module_has_the_protocol(cfg):
    module = family.family_module(cfg)
    assert [name for name in PROTOCOL if not callable(getattr(module, name, None))] == []
    held = family.resources(cfg)
    assert held.shared_memory > 0 and held.warps >= cfg.num_warps and held.accumulators > 0


def test_resources_are_what_validity_bounds():
    """A valid preset config fits the arch by its family's estimate; one stage more than fits is refused."""
    for cfg in load_preset("gemm_bf16_rcr_essential") + load_preset("conv_fwd_bf16_2d_essential"):
        held = family.resources(cfg)
        assert held.shared_memory <= H100.smem_per_block and held.accumulators <= rules.MAX_ACC_PER_THREAD
    big = td.GemmConfig(family="tiled", dtype="bf16", block_m=256, block_n=256, block_k=64, num_warps=8,
                        num_stages=4)
    assert family.resources(big).shared_memory > H100.smem_per_block
    assert "num_stages" in dict(family.config_errors(big, H100))


def test_an_unknown_out_dtype_is_reported_not_a_crash():
    """tma_ws staging was sized with DTYPES[out_dtype] before validity looked at the field (KeyError)."""
    for dtype in ("bf16", "fp8e4m3"):
        cfg = td.GemmConfig(family="tma_ws", dtype=dtype, out_dtype="fp64", block_k=128)
        assert "out_dtype" in dict(family.config_errors(cfg, H100))


def test_an_unknown_family_computes_no_problem():
    """A GEMM config of no family passed the problem match (None) when its fields matched the problem."""
    cfg = td.GemmConfig(family="blocked", dtype="fp16")
    with pytest.raises(InvalidConfig, match="family"):
        family.problem_mismatch(cfg, td.GemmProblem(64, 64, 64, dtype="fp16"))
    assert family.config_errors(cfg, H100)[0][0] == "family"


def test_an_unknown_conv_direction_names_the_field():
    cfg = td.ConvConfig(family="igemm", direction="sideways")
    with pytest.raises(InvalidConfig, match="direction"):
        family.family_module(cfg)
    errors = family.config_errors(cfg, H100)   # checked by the forward module's rules
    assert errors[0][0] == "direction" and errors == family.config_errors(cfg, H100)


def test_the_problem_of_another_op_mismatches():
    gemm, conv = SAMPLES[0], SAMPLES[6]
    problem = td.ConvProblem("fwd", 1, 16, 16, 1, (8, 8), (3, 3), dtype="bf16")
    assert family.problem_mismatch(gemm, problem).startswith("op:")
    assert family.problem_mismatch(conv, td.GemmProblem(64, 64, 64)).startswith("op:")


def test_check_config_returns_the_config_of_either_op():
    for cfg in SAMPLES[:1] + SAMPLES[6:7]:
        assert family.check_config(cfg, H100) is cfg
    bad = dataclasses.replace(SAMPLES[0], block_m=7)
    with pytest.raises(InvalidConfig, match="block_m"):
        family.check_config(bad, H100)
