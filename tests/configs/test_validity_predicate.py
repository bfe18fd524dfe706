"""The single validity predicate `config_errors` and the config-vs-problem match."""
from __future__ import annotations

import dataclasses

import pytest

import tiledispatch as td
from tiledispatch.arch.spec import known_archs
from tiledispatch.dtypes import INPUT_DTYPES
from tiledispatch.kernels.family import check_config, config_errors, is_valid_config, problem_mismatch, resources
from tiledispatch.kernels.rules import MAX_ACC_PER_THREAD
from tiledispatch.presets import list_presets, load_preset, preset_info

H100 = td.get_arch("sm_90")
BASE_FIELDS = dict(family="tiled", layout="rcr", dtype="fp16", block_m=64, block_n=64, block_k=32, num_warps=4,
                   num_stages=3)
BASE = td.GemmConfig(**BASE_FIELDS)


def make(**change):
    """BASE with changes; output and accumulator dtypes re-derived from the input dtype."""
    return td.GemmConfig(**{**BASE_FIELDS, **change})


def fields_of(cfg, arch=H100):
    return {field for field, _ in config_errors(cfg, arch)}


def test_base_config_is_valid():
    assert config_errors(BASE, H100) == [] and is_valid_config(BASE, H100)
    assert check_config(BASE, H100) is BASE


@pytest.mark.parametrize("change, field", [
    ({"block_m": 48}, "block_m"), ({"block_n": 512}, "block_n"), ({"block_n": 0}, "block_n"),
    ({"block_k": 8}, "block_k"), ({"block_k": 24}, "block_k"), ({"num_warps": 3}, "num_warps"),
    ({"num_stages": 0}, "num_stages"), ({"num_stages": 9}, "num_stages"), ({"group_m": 3}, "group_m"),
    ({"align": 2}, "align"), ({"layout": "rcc"}, "layout"), ({"activation": "swish"}, "activation"),
    ({"bias": "both"}, "bias"), ({"num_d": 3}, "num_d"), ({"with_c": 2}, "with_c"),
    ({"out_dtype": "int32"}, "out_dtype"), ({"acc_dtype": "fp16"}, "acc_dtype"), ({"dtype": "fp64"}, "dtype"),
])
def test_bad_field_values_are_rejected_with_their_field(change, field):
    cfg = dataclasses.replace(BASE, **change)
    assert field in fields_of(cfg)
    with pytest.raises(td.InvalidConfig) as info:
        check_config(cfg, H100)
    assert info.value.field == field
    assert cfg.name in str(info.value)


def test_too_many_accumulators_per_thread():
    cfg = dataclasses.replace(BASE, block_m=256, block_n=256, num_warps=4)
    assert 256 * 256 // (32 * 4) > MAX_ACC_PER_THREAD
    errors = dict(config_errors(cfg, H100))
    assert "num_warps" in errors and "accumulators" in errors["num_warps"]
    ok = dataclasses.replace(cfg, num_warps=16, num_stages=2)
    assert 256 * 256 // (32 * 16) <= MAX_ACC_PER_THREAD and "num_warps" not in fields_of(ok)


def test_shared_memory_over_the_arch_budget():
    """Valid on sm_90, invalid on sm_86: only the shared-memory budget differs (read from specs.json)."""
    cfg = dataclasses.replace(BASE, block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4)
    sm86 = td.get_arch("sm_86")
    assert sm86.smem_per_block < resources(cfg).shared_memory <= H100.smem_per_block
    assert config_errors(cfg, H100) == []
    errors = config_errors(cfg, sm86)
    assert [f for f, _ in errors] == ["num_stages"]
    assert "shared memory" in errors[0][1] and str(sm86.smem_per_block) in errors[0][1]
    with pytest.raises(td.InvalidConfig) as info:
        td.Registry("sm_86").add(cfg)
    assert info.value.field == "num_stages"
    assert td.Registry("sm_90").add(cfg).config == cfg
    too_big = dataclasses.replace(cfg, num_stages=6)
    assert resources(too_big).shared_memory > H100.smem_per_block and "num_stages" in fields_of(too_big)


def test_shared_memory_scales_with_dtype_bytes():
    assert resources(dataclasses.replace(BASE, dtype="fp32")).shared_memory == 2 * resources(BASE).shared_memory
    assert resources(dataclasses.replace(BASE, dtype="int8")).shared_memory * 2 == resources(BASE).shared_memory


def test_int8_rules():
    int8 = make(dtype="int8", block_k=16)
    assert int8.out_dtype == "int32" and int8.acc_dtype == "int32"
    assert fields_of(int8) == {"block_k"}
    assert fields_of(dataclasses.replace(int8, block_k=32)) == set()
    assert fields_of(dataclasses.replace(int8, block_k=32, activation="gelu")) == {"activation"}
    assert fields_of(dataclasses.replace(int8, block_k=32, out_dtype="fp16")) == {"out_dtype"}
    assert fields_of(dataclasses.replace(BASE, block_k=16)) == set()   # fp16 may use block_k 16


@pytest.mark.parametrize("arch", known_archs())
@pytest.mark.parametrize("dtype", INPUT_DTYPES)
def test_dtype_support_follows_specs_json(arch, dtype):
    spec = td.get_arch(arch)
    cfg = make(dtype=dtype)
    assert fields_of(cfg, spec) <= {"dtype"}
    assert ("dtype" not in fields_of(cfg, spec)) == spec.supports_dtype(dtype)


def test_dtype_not_supported_by_the_arch():
    """Every packaged arch supports every input dtype, so a spec without bf16 exercises the rule."""
    no_bf16 = dataclasses.replace(td.get_arch("sm_80"), dtypes=("fp16", "fp32", "tf32", "int8"))
    errors = dict(config_errors(make(dtype="bf16"), no_bf16))
    assert set(errors) == {"dtype"} and "sm_80" in errors["dtype"] and "'fp16'" in errors["dtype"]


def test_warps_over_the_arch_limit():
    small = dataclasses.replace(H100, max_warps_per_block=8)
    assert "num_warps" in fields_of(dataclasses.replace(BASE, num_warps=16), small)
    assert "num_warps" not in fields_of(dataclasses.replace(BASE, num_warps=16), H100)


def test_split_k_rules():
    assert fields_of(dataclasses.replace(BASE, split_k=2)) == {"split_k"}
    assert fields_of(dataclasses.replace(BASE, family="splitk", split_k=4)) == set()
    assert fields_of(dataclasses.replace(BASE, family="splitk", split_k=1)) == {"split_k"}
    assert fields_of(dataclasses.replace(BASE, family="splitk", split_k=5)) == {"split_k"}


def test_unknown_family_is_the_only_error_reported():
    errors = config_errors(dataclasses.replace(BASE, family="blocked", block_m=7), H100)
    assert [f for f, _ in errors] == ["family"]
    assert "'tiled'" in errors[0][1] and "'splitk'" in errors[0][1]


def test_several_errors_are_all_reported_and_the_first_is_raised():
    cfg = dataclasses.replace(BASE, block_m=48, group_m=3, align=2)
    assert fields_of(cfg) == {"block_m", "group_m", "align"}
    with pytest.raises(td.InvalidConfig, match=r"\(\+2 more\)") as info:
        check_config(cfg, H100)
    assert info.value.field == "block_m"


@pytest.mark.parametrize("preset", list_presets())
def test_every_preset_config_is_valid_on_sm_90(preset):
    assert preset_info(preset).get("arch", preset_info(preset).get("space", {}).get("arch")) == "sm_90"
    bad = [(cfg.name, errs) for cfg in load_preset(preset)
           if (errs := config_errors(cfg, H100))]
    assert not bad, bad[:3]


def test_add_preset_on_a_smaller_arch_records_what_it_skips():
    registry = td.Registry("sm_86")
    added = registry.add_preset("gemm_fp16_rcr_essential")
    total = len(load_preset("gemm_fp16_rcr_essential"))
    assert registry.skipped, "some essential sm_90 tiles exceed sm_86's shared memory"
    assert len(added) + len(registry.skipped) == total == len(registry) + len(registry.skipped)
    assert all("shared memory" in reason or "needs TMA" in reason for reason in registry.skipped.values())
    assert any("needs TMA" in reason for reason in registry.skipped.values()), "the TMA families need sm_90"


# -- config vs problem ----------------------------------------------------------------------------------------
def test_problem_mismatch_names_the_field():
    cfg = dataclasses.replace(BASE, align=1)
    ok = td.GemmProblem(33, 65, 17, dtype="fp16")
    assert problem_mismatch(cfg, ok) is None
    cases = {"layout": dataclasses.replace(ok, layout="rrr"), "dtype": td.GemmProblem(33, 65, 17, dtype="bf16"),
             "out_dtype": td.GemmProblem(33, 65, 17, dtype="fp16", out_dtype="fp32"),
             "epilogue": td.GemmProblem(33, 65, 17, dtype="fp16", epilogue=td.Epilogue("relu"))}
    for field, problem in cases.items():
        assert problem_mismatch(cfg, problem).startswith(field + ":"), field


def test_aligned_kernel_needs_an_aligned_problem_and_unaligned_runs_anything():
    a16, a1 = BASE, dataclasses.replace(BASE, align=1)
    aligned, unaligned = td.GemmProblem(64, 64, 64, dtype="fp16"), td.GemmProblem(64, 64, 17, dtype="fp16")
    assert aligned.align == 16 and unaligned.align == 1
    assert problem_mismatch(a16, aligned) is None and problem_mismatch(a1, aligned) is None
    assert problem_mismatch(a1, unaligned) is None
    assert problem_mismatch(a16, unaligned).startswith("align:")


def test_grid_limit_on_batch_times_split():
    cfg = dataclasses.replace(BASE, family="splitk", split_k=64, align=1)
    assert problem_mismatch(cfg, td.GemmProblem(16, 16, 16, batch=1023, dtype="fp16")) is None
    assert problem_mismatch(cfg, td.GemmProblem(16, 16, 16, batch=1024, dtype="fp16")).startswith("batch:")


def test_deep_pipelines_are_valid_while_their_stages_fit_in_shared_memory():
    """Up to 16 stages (small tiles of the memory-bound shapes); shared memory bounds the depth of larger ones."""
    small = dataclasses.replace(BASE, block_m=64, block_n=32, block_k=128, num_stages=8)
    assert not config_errors(small, H100)
    assert fields_of(dataclasses.replace(small, block_n=128, num_stages=16)) == {"num_stages"}
    assert fields_of(dataclasses.replace(small, num_stages=9)) == {"num_stages"}   # not among the depths offered


def test_tma_family_rules_name_their_field():
    """What Triton 3.6 on sm_90 can and cannot do with the TMA families, each refused by field."""
    ws = td.GemmConfig("tma_ws", "rcr", "bf16", block_m=128, block_n=128, block_k=64, num_warps=4)
    assert not config_errors(ws, H100)
    assert not config_errors(dataclasses.replace(ws, num_stages=4), H100)
    cases = [
        (dataclasses.replace(ws, num_warps=8), "num_warps"),           # warp specialization needs 4 warps
        (dataclasses.replace(ws, with_c=True), "with_c"),               # wrong results reading C
        (dataclasses.replace(ws, num_d=1), "num_d"),
        (dataclasses.replace(ws, bias="row"), "bias"),
        (dataclasses.replace(ws, block_m=64, block_n=256), "block_n"),  # the compile fails
        (dataclasses.replace(ws, align=1), "align"),                    # descriptors need 16-byte strides
        (dataclasses.replace(ws, subtile=2), "subtile"),                # subtiling is tma_persistent's
        (dataclasses.replace(ws, block_n=64, num_stages=8), "num_stages"),  # wrong results past 4 stages
        (dataclasses.replace(ws, family="tma_persistent", num_warps=8, dtype="fp8e4m3", layout="rrr"), "layout"),
    ]
    for cfg, field in cases:
        assert field in [f for f, _ in config_errors(cfg, H100)], (cfg.name, field)
    assert "needs TMA" in " ".join(r for _, r in config_errors(ws, td.get_arch("sm_86")))
    batched = td.GemmProblem(256, 256, 256, batch=2, dtype="bf16")
    assert problem_mismatch(ws, batched).startswith("batch")
    assert problem_mismatch(dataclasses.replace(ws, family="tma_persistent"), batched) is None
