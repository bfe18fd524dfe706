"""Numerics of the persistent TMA families (tma_persistent, tma_ws, streamk) and of fp8 (but fp8 tma_ws, a Gluon
kernel) on Triton's CPU interpreter, against the float64 reference, with the output poisoned first.

Shapes are multiples of 16 (the TMA families need align=16) but not of the 32-wide tiles:
  48x80x272 batch 1 - ragged last tile in M and N, 8.5 K blocks (a partial last block, zero-filled by TMA)
  16x32x48 batch 3  - B shared by every batch (batch stride 0) and per-batch C
  96x64x16 batch 2  - one K block shorter than BLOCK_K; C and D given as 2-D (broadcast over the batch)
tma_ws computes one batch and must refuse the batched cases by name.
Every case runs with the SM count of an H100 (stream-K alone: fewer tiles than programs) and with 3 SMs
(several data-parallel waves before the stream-K tiles, and K ranges that split tiles between programs).
"""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import tiledispatch as td
import tiledispatch.runtime.arguments
from tiledispatch.kernels import gemm_streamk
from tiledispatch.kernels.family import problem_mismatch
from tiledispatch.runtime.arguments import GemmArgs
from tiledispatch.testing import check_against_reference, matrix, poisoned, suites, vector

CONFIGS = suites.tma_configs()
SHAPES = ((48, 80, 272, 1), (16, 32, 48, 3), (96, 64, 16, 2))
SMS = (132, 3)


@pytest.fixture(scope="module", params=SMS, ids=lambda s: f"sms{s}")
def registry(request, build_registry):
    reg = build_registry(CONFIGS)
    small = td.Registry(td.get_arch("sm_90").with_device(request.param, "test device"))
    for cfg in CONFIGS:
        small.add(cfg)
    assert not small.build(max_workers=2).failed
    return small


def make_case(cfg: td.GemmConfig, m: int, n: int, k: int, batch: int, seed: int) -> GemmArgs:
    gen = torch.Generator().manual_seed(seed)
    scale = 16.0 if cfg.dtype == "fp8e4m3" else 1.0
    lead = batch if batch > 1 else None
    a = matrix(m, k, letter=cfg.layout[0], dtype=cfg.dtype, batch=lead, generator=gen, scale=scale)
    b = matrix(k, n, letter=cfg.layout[1], dtype=cfg.dtype, batch=None if batch == 3 else lead, generator=gen,
               scale=scale)
    two_d = batch == 2
    c = matrix(m, n, dtype=cfg.out_dtype, batch=None if two_d else lead, generator=gen) if cfg.with_c else None
    bias = vector(m if cfg.bias == "row" else n, dtype=cfg.out_dtype, generator=gen) if cfg.bias != "none" else None
    d = tuple(matrix(m, n, dtype=cfg.out_dtype, batch=None if two_d else lead, generator=gen)
              for _ in range(cfg.num_d))
    out = poisoned(((batch,) if lead else ()) + (m, n), cfg.out_dtype)
    scales = (torch.tensor([1 / scale]), torch.tensor([0.5 / scale])) if cfg.dtype == "fp8e4m3" else (None, None)
    return GemmArgs(a, b, out, c, bias, cfg.bias, d, -0.75, 0.5 if cfg.with_c else 0.0, cfg.activation,
                    cfg.out_dtype, False, *scales)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_family_matches_reference(registry, cfg):
    for i, (m, n, k, batch) in enumerate(SHAPES):
        args = make_case(cfg, m, n, k, batch, seed=i)
        if cfg.family == "tma_ws" and batch > 1:
            with pytest.raises(td.UnsupportedProblem) as info:
                registry.get(cfg.name).run(args.a, args.b, out=args.out, c=args.c, bias=args.bias, d=args.d,
                                           alpha=args.alpha, beta=args.beta)
            assert info.value.field == "batch"
            continue
        out = registry.get(cfg.name).run(args.a, args.b, out=args.out, c=args.c, bias=args.bias, d=args.d,
                                         alpha=args.alpha, beta=args.beta, scale_a=args.scale_a,
                                         scale_b=args.scale_b)
        check_against_reference(out, args, cfg.dtype)


def test_suite_covers_every_tma_family_layout_and_fp8():
    assert {(c.family, c.layout) for c in CONFIGS if c.dtype == "fp16"} == {
        (f, l_) for f in suites.TMA_FAMILIES for l_ in suites.LAYOUTS}
    # fp8 tma_ws is a Gluon kernel, which the interpreter cannot run: tests/kernels/test_gemm_ws_fp8.py
    fp8_interpreted = {"tiled", "splitk", *suites.TMA_FAMILIES} - {"tma_ws"}
    assert {c.family for c in CONFIGS if c.dtype == "fp8e4m3"} == fp8_interpreted
    assert {c.family for c in suites.gluon_configs()} == {"tma_ws"}
    assert {c.subtile for c in CONFIGS if c.family == "tma_persistent"} == {0, 1, 2}
    assert {c.split_k for c in CONFIGS if c.family == "tma_persistent"} == {1, 2, 3}   # split over K too


def test_split_tma_persistent_is_one_launch_whose_last_unit_per_tile_reduces():
    """split_k > 1: (tile, K range) units store fp32 partials into per-tile slots and count their arrival; the
    last unit of a tile sums the slots and runs the epilogue through pointers (no TMA store, so subtiling does
    not apply), with one zero-initialised counter per tile."""
    from tiledispatch.kernels import gemm_tma
    from tiledispatch.kernels.family import config_errors

    arch = td.get_arch("sm_90")
    cfg = next(c for c in CONFIGS if c.family == "tma_persistent" and c.split_k == 3)
    assert [e.fn for e in gemm_tma.entries(cfg)] == ["gemm_tma_kernel"]
    plan = gemm_tma.launch_plan(cfg, 100, 70, 500, 2, 132)
    tiles = 2 * 4 * 3                                                  # batch 2 x ceil(100/32) x ceil(70/32)
    assert plan.grids == ((min(tiles * 3, plan.grids[0][0]), 1, 1),)
    assert plan.workspaces == (("ws_ptr", tiles * 3 * 32 * 32, "fp32"),)
    assert plan.counters == (("count_ptr", tiles),)
    assert "subtile" in dict(config_errors(td.GemmConfig(**{**cfg.to_dict(), "subtile": 2}), arch))
    assert "split_k" in dict(config_errors(td.GemmConfig(**{**cfg.to_dict(), "family": "tma_ws",
                                                                 "split_k": 2}), arch))


@pytest.mark.parametrize("split", [2, 3])
def test_split_tma_persistent_leaves_its_counters_zero(registry, split):
    """Calls after the first find their arrival counters at zero again: were one left counted up, no unit of
    that tile would see the last arrival and its output would stay poisoned. Every call gives the same bits
    (the slots are summed in split order whichever unit arrives last)."""
    cfg = next(c for c in CONFIGS if c.family == "tma_persistent" and c.split_k == split)
    kernel = registry.get(cfg.name)
    outs = []
    for _ in range(3):
        args = make_case(cfg, 48, 80, 272, 1, seed=7)
        outs.append(kernel.run(args.a, args.b, out=args.out, c=args.c, bias=args.bias, d=args.d,
                               alpha=args.alpha, beta=args.beta))
        check_against_reference(outs[-1], args, cfg.dtype)
    assert all(torch.equal(outs[0], out) for out in outs[1:])


@pytest.mark.parametrize("tiles, k_tiles, programs, group", [
    (10, 7, 3, 1), (4, 9, 36, 1), (264, 4, 132, 1), (3, 1, 132, 1), (133, 64, 132, 1), (5, 2, 4, 1),
    (96, 64, 132, 2), (56, 56, 132, 2), (12, 5, 6, 3), (408, 7, 132, 4), (8, 3, 4, 4)])
def test_streamk_split_covers_every_iteration_once(tiles, k_tiles, programs, group):
    """Every K iteration of every stream-K tile belongs to exactly one program, and a tile's pieces fit
    its SK_SLOTS workspace slots (what the fixup kernel reads); lanes of `group` programs cover the same K
    iterations of consecutive tiles."""
    programs = programs // group * group            # what launch_plan launches
    dp, per_lane, slots = gemm_streamk.split_plan(tiles, k_tiles, programs, group)
    assert dp % programs == 0 and 0 <= dp <= tiles
    covered = {}
    for pid in range(programs):                     # the kernel's walk, program by program
        lane, member = divmod(pid, group)
        start, end = lane * per_lane, min((lane + 1) * per_lane, (tiles - dp) // group * k_tiles)
        segments = -(-per_lane // k_tiles) + 1      # SK_SEGS: the tile pieces the kernel visits per lane
        assert end <= start or (end - 1) // k_tiles - start // k_tiles < segments
        for it in range(start, end):
            unit, k = divmod(it, k_tiles)
            key = (unit * group + member, k)
            assert key not in covered
            covered[key] = lane - (unit * k_tiles) // per_lane       # the workspace slot it writes
    assert set(covered) == {(t, k) for t in range(tiles - dp) for k in range(k_tiles)}
    for tile in range(tiles - dp):
        assert {covered[(tile, k)] for k in range(k_tiles)} <= set(range(slots))


@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c.layout == "rcr" and c.dtype == "fp16"], ids=lambda c: c.name)
def test_tma_families_run_16_byte_rows_without_padding(registry, cfg):
    """24x40x56 fp16: sizes are multiples of 8, not 16 (problem align 8): 16-byte rows are all a tensor
    descriptor needs, so the TMA families run it directly; so do pointer kernels compiled for align 16 (16-byte
    vectors), unlike fp8 ones (below)."""
    args = make_case(cfg, 24, 40, 56, 1, seed=7)
    problem = td.runtime.arguments.problem_from_args(args)
    assert problem.align == 8
    assert registry.get(cfg.name).is_supported(problem)
    out = registry.get(cfg.name).run(args.a, args.b, out=args.out, c=args.c, bias=args.bias, d=args.d,
                                     alpha=args.alpha, beta=args.beta)
    check_against_reference(out, args, cfg.dtype)
    tiled = next(c for c in suites.aligned_configs() if c.family == "tiled" and c.align == 16)
    assert problem_mismatch(tiled.with_epilogue(cfg.epilogue), problem) is None


def test_fp8_needs_16_element_rows_for_descriptors():
    cfg = next(c for c in CONFIGS if c.dtype == "fp8e4m3" and c.family == "tma_persistent")
    for (m, n, k), ok in (((24, 40, 56), False), ((24, 48, 64), True)):
        problem = td.GemmProblem(m, n, k, dtype="fp8e4m3", epilogue=cfg.epilogue)
        reason = problem_mismatch(cfg, problem)
        assert (reason is None) if ok else reason.startswith("align"), reason


# Tiles at the edge of the H100/H200's 227 KiB: tma_ws 128x256 stages its output tile (64 KiB) through shared
# memory as tma_persistent does; an estimate without it let tma_ws 128x256x64 s4 (262,632 B) through validity and
# the build, to fail only at its first launch on the H200 (tools/probe_space.py, 2026-11-26).
EDGE_CONFIGS = [td.GemmConfig("tma_ws", "rcr", "bf16", block_m=128, block_n=256, block_k=64, num_warps=4,
                              num_stages=2, align=16),
                td.GemmConfig("tma_persistent", "rcr", "bf16", block_m=128, block_n=256, block_k=64, num_warps=8,
                              num_stages=3, align=16)]


@pytest.mark.parametrize("cfg", EDGE_CONFIGS, ids=lambda c: c.name)
def test_shared_memory_estimate_never_undercounts_the_build(build_registry, cfg):
    from tiledispatch.kernels.family import is_valid_config, resources

    entry = build_registry([cfg]).get(cfg.name)
    shared = json.loads((entry.entry_dir / "manifest.json").read_text())["resources"]["gemm_tma_kernel"]["shared"]
    assert shared <= resources(cfg).shared_memory, (shared, resources(cfg).shared_memory)
    deeper = dataclasses.replace(cfg, num_stages=cfg.num_stages + 2)
    assert not is_valid_config(deeper, td.get_arch("sm_90"))   # 64 KiB more: past the limit
