"""fp8 tma_ws, the Gluon kernel (kernels/gemm_ws_fp8.py), on the CPU lane: its sm_90 builds (compiled in the
session's spawned workers), their shared memory against the validity predicate's estimate, the host descriptor
geometry its launches read, the launch grid, and the clear refusals (interpreter, unsupported fields).
Numerics run on the GPU lane (tests/gpu/test_tma_gpu.py)."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import tiledispatch as td
from tiledispatch.kernels import gemm_ws_fp8
from tiledispatch.kernels.family import config_errors, family_module, resources
from tiledispatch.runtime import descriptors
from tiledispatch.testing import suites

CONFIGS = suites.gluon_configs()
ARCH = td.get_arch("sm_90")


@pytest.fixture(scope="module")
def registry(build_registry):
    return build_registry(CONFIGS)


def test_fp8_tma_ws_is_the_gluon_form_and_other_tma_ws_is_not():
    assert family_module(CONFIGS[0]) is gemm_ws_fp8
    bf16 = td.GemmConfig("tma_ws", "rcr", "bf16", block_m=128, block_n=128, block_k=64, num_warps=4)
    assert family_module(bf16) is not gemm_ws_fp8
    assert {e.dialect for e in family_module(bf16).entries(bf16)} == {"triton"}


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_builds_within_the_estimated_shared_memory(registry, cfg):
    """Every sm_90 build fits the arch and uses at most what validity estimates (within 1 KiB: the estimate
    decides which stage counts are legal, so it must not undercount)."""
    entry = registry.get(cfg.name)
    manifest = json.loads((entry.entry_dir / "manifest.json").read_text())
    shared = manifest["resources"]["gemm_tma_kernel"]["shared"]
    assert shared <= resources(cfg).shared_memory <= shared + 1024, (shared, resources(cfg).shared_memory)
    assert shared <= ARCH.smem_per_block


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_entry_takes_host_descriptors_with_their_layouts(cfg):
    """The descriptor types carry the shared layout of each box (Gluon's signature form); the launcher reads
    their boxes and geometry from them like any host descriptor."""
    (entry,) = gemm_ws_fp8.entries(cfg)
    assert entry.dialect == "gluon"
    assert type(entry).from_json(entry.to_json()) == entry
    params = {p.name: p for p in entry.params}
    m, n, k = 300, 200, 272
    values = {"a_ptr": "A", "b_ptr": "B", "out_ptr": "O", "M": m, "N": n, "K": k,
              "stride_ar": k, "stride_bc": k, "stride_or": n}
    a_rows = 64 if cfg.block_m == 192 else cfg.block_m   # 192 rows: three 64-row boxes a stage
    want = {"a_desc": ("A", (m, k), (k, 1), (a_rows, 128)), "b_desc": ("B", (n, k), (k, 1), (cfg.block_n, 128)),
            "out_desc": ("O", (m, n), (n, 1), (64, cfg.block_n))}
    for name, (base, shape, strides, block) in want.items():
        assert "NVMMASharedLayout" in params[name].ty
        g = descriptors.geometry(params[name], values)
        assert (values[g.base], g.shape, g.strides, g.block) == (base, shape, strides, block)
    assert ("bias_ptr" in params) == (cfg.bias != "none")


def test_render_threads_the_bias_only_where_there_is_one():
    plain, with_bias = CONFIGS[0], CONFIGS[1]
    assert "bias_ptr" not in gemm_ws_fp8.render(plain)
    text = gemm_ws_fp8.render(with_bias)
    assert "bias_ptr + cols" in text and "gl.erf(" in text and "tl." not in text


def test_launch_is_one_program_per_sm_at_most_one_per_tile():
    cfg = CONFIGS[0]
    assert gemm_ws_fp8.launch_plan(cfg, 8192, 8192, 8192, 1, 132).grids == ((132, 1, 1),)
    assert gemm_ws_fp8.launch_plan(cfg, 300, 200, 64, 1, 132).grids == ((3 * 2, 1, 1),)
    tall = next(c for c in CONFIGS if c.block_m == 192)
    assert gemm_ws_fp8.launch_plan(tall, 400, 200, 64, 1, 132).grids == ((3 * 2, 1, 1),)   # 400 rows: 3 tiles


def test_split_form_launches_a_program_per_unit_with_slots_and_counters():
    """split_k units per tile (split-major), at most one program per SM; an fp32 slot of the whole tile per split
    and one arrival counter per tile and consumer warp group (each group sums its own rows)."""
    split = next(c for c in CONFIGS if c.split_k == 2 and c.block_m == 128)
    plan = gemm_ws_fp8.launch_plan(split, 256, 4096, 14336, 1, 132)   # 2 x 32 tiles: 128 units, one wave
    assert plan.grids == ((128, 1, 1),)
    assert plan.workspaces == (("ws_ptr", 64 * 2 * 128 * 128, "fp32"),)
    assert plan.counters == (("count_ptr", 64 * 2),)
    tall = next(c for c in CONFIGS if c.split_k == 3)
    plan = gemm_ws_fp8.launch_plan(tall, 8192, 8192, 8192, 1, 132)
    assert plan.grids == ((132, 1, 1),) and plan.counters == (("count_ptr", 43 * 64 * 3),)
    (entry,) = gemm_ws_fp8.entries(split)
    names = [p.name for p in entry.params]
    assert {"ws_ptr", "count_ptr"} <= set(names) and entry.constexprs()["SPLIT_K"] == 2
    text = gemm_ws_fp8.render(split)
    # _consume takes them, and both consumer partitions pass them
    assert text.count("ws_ptr, count_ptr, M, N") == 3 and "_sum_splits(acc, tile % tiles" in text
    plain = next(c for c in CONFIGS if c.split_k == 1)
    assert "ws_ptr, count_ptr, M, N" not in gemm_ws_fp8.render(plain) and gemm_ws_fp8.launch_plan(plain, 256, 256, 256, 1, 132).counters == ()


def test_three_consumer_form_renders_one_partition_per_64_rows():
    """192-row tiles: three consumer partitions (two of them workers), three staging buffers, slots released by
    three arrivals, each block promoted as soon as its group completes (CHUNK 1: two register sets, which fit
    the 160 registers each consumer gets beside the producer's warp group)."""
    tall = next(c for c in CONFIGS if c.block_m == 192)
    text = gemm_ws_fp8.render(tall)
    assert text.count("(_consume, (") == 3 and "out_smem2" in text and "count=3)" in text
    assert "], [4, 4, 1], [160, 160, 24])" in text
    assert gemm_ws_fp8.entries(tall)[0].constexprs()["CHUNK"] == 1
    wide = gemm_ws_fp8.render(CONFIGS[0])
    assert wide.count("(_consume, (") == 2 and "], [4, 1], [240, 24])" in wide


def test_interpreter_refuses_it_by_name(registry):
    cfg = CONFIGS[0]
    a = torch.zeros(128, 128).to(torch.float8_e4m3fn)
    b = torch.zeros(128, 128).to(torch.float8_e4m3fn).t()
    with pytest.raises(td.BadInput, match="interpreter cannot run") as info:
        registry.get(cfg.name).run(a, b)
    assert info.value.field == "device"


@pytest.mark.parametrize("change, field", [
    (dict(block_m=64), "block_m"),            # two or three 64-row consumer warp groups
    (dict(block_m=256), "block_m"),
    (dict(block_m=192, block_n=64), "block_n"),   # 192 rows run 128 columns only
    (dict(block_m=192, num_stages=5), "num_stages"),   # 5 x 40 KiB slots and three staging buffers
    (dict(block_n=256), "block_n"),           # out of registers for the lagged promotion
    (dict(block_k=64), "block_k"),
    (dict(num_stages=7), "num_stages"),       # 7 x 32 KiB of A and B slots exceed the shared memory
    (dict(num_warps=8), "num_warps"),         # warp specialization needs 4
    (dict(with_c=True), "with_c"),
    (dict(num_d=1), "num_d"),
    (dict(split_k=16), "split_k"),          # the last split sums the slots in an unrolled loop of at most 8
    (dict(split_k=5), "split_k"),           # not a split count any family takes
])
def test_validity_names_the_field(change, field):
    cfg = dataclasses.replace(CONFIGS[0], **change)
    assert field in dict(config_errors(cfg, ARCH))


def test_deeper_rings_than_triton_ws_are_legal_for_the_gluon_form():
    """tma_ws's Triton form stops at 4 stages (its pipeline was wrong deeper); the Gluon form runs its own ring,
    bounded by shared memory only: 6 stages of 128x128 and 8 of 128x64."""
    assert not config_errors(dataclasses.replace(CONFIGS[0], num_stages=6), ARCH)
    assert not config_errors(dataclasses.replace(CONFIGS[0], block_n=64, num_stages=8), ARCH)
    bf16 = td.GemmConfig("tma_ws", "rcr", "bf16", block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=6)
    assert "num_stages" in dict(config_errors(bf16, ARCH))


def test_only_the_fp8_form_of_tma_ws_splits_k():
    bf16 = td.GemmConfig("tma_ws", "rcr", "bf16", block_m=128, block_n=128, block_k=64, num_warps=4, split_k=2)
    assert "only the fp8 form splits K" in dict(config_errors(bf16, ARCH))["split_k"]
    assert not config_errors(dataclasses.replace(CONFIGS[0], num_stages=4, split_k=4), ARCH)
