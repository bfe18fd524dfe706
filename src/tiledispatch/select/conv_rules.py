"""Analytic ranking of convolution instances: padding waste of the implicit-GEMM tiles, wave quantization,
and the larger of the memory and the compute time."""
from __future__ import annotations

import math

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.kernels import (conv_halo, conv_halo_fh, conv_igemm, conv_im2col, conv_roll, conv_tma,
                                  conv_tma_wgrad, conv_wgrad)
from tiledispatch.problems.conv import ConvProblem

LAUNCH_US = 3.0
# Fraction of the tensor-core peak: a 2-D dot (one group per program) vs a batched dot of merged groups;
# CUDA-core FMAs (direct) run at about 1/16 of the fp16 tensor-core peak on sm_90.
DOT_EFFICIENCY = {1: 0.55}
GEMM_EFFICIENCY = 0.8    # 1x1 as a TMA GEMM: about the GEMM presets' share of the peak
BATCHED_DOT_EFFICIENCY = 0.25
FMA_FRACTION = 1.0 / 16
TMA_EFFICIENCY = 0.7     # stride-1 implicit GEMM over tensor-copy boxes (no per-pixel index math)
MEMORY_EFFICIENCY = {"direct": 0.7, "igemm": 0.6, "gemm": 0.8, "tma": 0.7}
WORKSPACE_PASSES = 2     # split reductions write and read an fp32 partial per split


def _ceil_to(x: int, m: int) -> int:
    return -(-x // m) * m


def _gemm_view(cfg: ConvConfig, problem: ConvProblem) -> tuple[int, int, int]:
    m, n, k = problem.implicit_gemm()
    if problem.direction == "bwd_data":   # phase decomposition: each input pixel meets taps / prod(stride)
        k = max(problem.k_per_group, k // math.prod(problem.stride))
    return m, n, k


def _wgrad_tiles(cfg: ConvConfig, problem: ConvProblem) -> int:
    """bwd_weight programs per split as the kernel launches them ('diag': taps x channel tiles of whole
    groups; row kloops: a filter row of taps per program)."""
    if cfg.family == "tma":
        return math.prod(conv_tma_wgrad.tile_counts(cfg, problem)) * problem.groups
    tiles_m, tiles_n, group_blocks = conv_wgrad.tile_counts(cfg, problem)
    return tiles_m * tiles_n * group_blocks


def _padded_flops(cfg: ConvConfig, problem: ConvProblem) -> float:
    """FLOPs the tiles execute, padding included (kloop 'diag': the whole block-diagonal tile of every tap;
    'diagrow': of every unrolled tap, masked ones included)."""
    m, n, k = _gemm_view(cfg, problem)
    # tiles of whole groups, squared
    if cfg.kloop in conv_wgrad.DIAG_KLOOPS and problem.direction == "bwd_weight":
        return 2.0 * _wgrad_tiles(cfg, problem) * conv_wgrad.row_taps(cfg) * cfg.block_n * cfg.block_n \
            * _ceil_to(k, cfg.block_k)
    if cfg.kloop == "diag":
        channels = problem.k if problem.direction == "fwd" else problem.c
        taps = k // problem.c_per_group if problem.direction == "fwd" else k // problem.k_per_group
        return 2.0 * _ceil_to(m, cfg.block_m) * _ceil_to(channels, cfg.block_n) * cfg.block_n * taps
    taps = math.prod(problem.filter)
    per_tap = k // taps if problem.direction != "bwd_weight" else problem.c_per_group
    if cfg.kloop == "tap" and problem.direction != "bwd_weight":
        k_pad = taps * _ceil_to(per_tap, cfg.block_k)
    else:
        k_pad = _ceil_to(k, cfg.block_k)
    return 2.0 * problem.groups * _ceil_to(m, cfg.block_m) \
        * _ceil_to(n, 16 if n < cfg.block_n else cfg.block_n) * k_pad


def direct_programs(cfg: ConvConfig, problem: ConvProblem, arch: ArchSpec) -> int:
    """Programs of a direct-family launch: its kernel's own grid for the row kloops, else pixel blocks x
    channel tiles."""
    if cfg.kloop == "roll":   # row strips x channel tiles (x filter depths)
        return math.prod(conv_roll.grid(cfg, problem, arch.sm_count))
    if cfg.kloop == "halo":   # images x row blocks x 8-column strips x channel tiles
        return math.prod(conv_halo.grid(cfg, problem, arch.sm_count))
    if cfg.kloop == "halofh":   # images x row chunks x column strips x channel tiles
        return math.prod(conv_halo_fh.grid(cfg, problem, arch.sm_count))
    return math.ceil(problem.n * math.prod(problem.output) / cfg.block_m) * math.ceil(problem.k / cfg.block_n)


def estimate_us(cfg: ConvConfig, problem: ConvProblem, arch: ArchSpec) -> float:
    """Estimated run time in microseconds (a ranking score, not a prediction to report)."""
    mem_us = problem.min_bytes / (arch.hbm_gbps * 1e3 * MEMORY_EFFICIENCY[cfg.family])
    if cfg.family == "direct":
        compute_us = problem.flops / (arch.peak_tflops_fp16 * 1e6 * FMA_FRACTION)
        programs = direct_programs(cfg, problem, arch)
    else:
        eff = {"gemm": GEMM_EFFICIENCY, "tma": TMA_EFFICIENCY}.get(
            cfg.family, DOT_EFFICIENCY.get(cfg.groups_per_program, BATCHED_DOT_EFFICIENCY))
        compute_us = _padded_flops(cfg, problem) / (arch.peak_tflops_fp16 * 1e6 * eff)
        m, n, _ = _gemm_view(cfg, problem)
        # igemm, tma
        if problem.direction == "bwd_weight" and cfg.kloop in (*conv_wgrad.DIAG_KLOOPS, "taprow"):
            column_tiles, m = _wgrad_tiles(cfg, problem), cfg.block_m   # the kernel's own grid
        elif cfg.kloop == "diag":   # channel tiles span whole groups
            column_tiles = math.ceil(problem.groups * n / cfg.block_n)
        else:
            column_tiles = math.ceil(problem.groups / cfg.groups_per_program) * math.ceil(n / cfg.block_n)
        programs = math.ceil(m / cfg.block_m) * column_tiles
        if cfg.family == "tma" and problem.direction != "bwd_weight":   # whole pixel boxes per image
            programs = conv_tma.pixel_tiles(cfg, problem) * column_tiles
    splits = 1
    if cfg.family == "igemm" and problem.direction != "bwd_weight":
        splits = conv_igemm.split_count(cfg, problem, arch.sm_count)
    elif cfg.family == "tma" and problem.direction != "bwd_weight":
        splits = conv_tma.split_count(cfg, problem, arch.sm_count)
    elif cfg.family == "gemm" and (problem.direction == "bwd_weight" or cfg.kloop == "im2col"):
        splits = max(cfg.split_k, 1)   # the split-K GEMM of a 1x1 wgrad or of an im2col convolution
    programs *= splits
    waves = programs / arch.sm_count
    quantization = math.ceil(waves) / waves if waves >= 1 else 1.0 / waves
    body = max(mem_us, compute_us) * min(quantization, 4.0)
    if problem.direction == "bwd_weight" and cfg.family in ("igemm", "tma"):
        body += WORKSPACE_PASSES * 4 * problem.tensor_elements()["weight"] * max(cfg.split_k, 1) / (
            arch.hbm_gbps * 1e3)
    if splits > 1:   # the fp32 partials of every split, written and read back, and the reduce launch
        if problem.direction == "bwd_weight":
            written = problem.tensor_elements()["weight"]
        elif cfg.kloop == "im2col":   # the GEMM's own output: y, or bwd_data's dcols
            written = math.prod(conv_im2col.sizes(problem, cfg)[:2])
        else:
            written = conv_igemm.written_elements(problem)
        body += WORKSPACE_PASSES * 4 * written * splits / (arch.hbm_gbps * 1e3)
        body += LAUNCH_US
    if cfg.kloop == "im2col":   # the 16-bit cols workspace, written and read back, and the copy's launch
        body += (WORKSPACE_PASSES * 2 * conv_im2col.workspace_elements(problem, cfg) / (arch.hbm_gbps * 1e3)
                 + LAUNCH_US)
    return LAUNCH_US + body
