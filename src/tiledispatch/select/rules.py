"""Analytic ranking: estimated time from tile waste, wave quantization over the SMs, occupancy and K-loop
length."""
from __future__ import annotations

import math
from typing import cast

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.dtypes import DTYPES
from tiledispatch.kernels import gemm_splitk
from tiledispatch.kernels.family import resources
from tiledispatch.problems.gemm import GemmProblem

LAUNCH_US = 3.0            # per kernel launch
CTA_OVERHEAD_US = 0.6      # prologue (pipeline fill) + epilogue latency of one program
L2_BANDWIDTH_FACTOR = 2.5  # operand re-reads mostly hit L2, which is faster than HBM
REFERENCE_TILE = 128 * 256
# align=1 kernels load element-wise; measured ~3x slower on H200 (3000x5000x700 bf16)
UNALIGNED_SLOWDOWN = 3.0
# Fraction of the tensor-core peak each family reaches on compute-bound tiles, relative to tma_persistent:
# the ratio of each family's best time over shapes with M, N, K >= 4096 in the H200 sweeps
# (benchmarks/results/sweeps/, bf16/fp16 rcr/rrr): pointer-loaded wgmma tiles reach ~0.6 of the TMA ones.
FAMILY_EFFICIENCY = {"tiled": 0.6, "splitk": 0.6, "tma_persistent": 1.0, "tma_ws": 0.95, "streamk": 0.85}
PERSISTENT_OVERLAP = 0.5   # share of a tile's prologue/epilogue latency a persistent program still pays
FIXUP_PASSES = 2           # stream-K partial tiles are written once and read once (fp32) by the fixup kernel


def _occupancy(cfg: GemmConfig, arch: ArchSpec) -> int:
    by_smem = arch.smem_per_sm // max(1, resources(cfg).shared_memory)
    by_warps = arch.max_warps_per_sm // cfg.num_warps
    return max(1, min(by_smem, by_warps, 4))


def _tile_efficiency(cfg: GemmConfig) -> float:
    """Small tiles reach a lower fraction of the MMA peak (less reuse per loaded byte, short instructions)."""
    eff = min(1.0, (cfg.block_m * cfg.block_n) / REFERENCE_TILE) ** 0.35
    return eff * (1.0 if cfg.block_k >= 32 else 0.8)


def estimate_us(cfg: GemmConfig, problem: GemmProblem, arch: ArchSpec) -> float:
    """Estimated run time in microseconds (a ranking score, not a prediction to report)."""
    split = cfg.split_k    # 1 but for the splitk family and split tma_persistent kernels
    tiles = math.ceil(problem.m / cfg.block_m) * math.ceil(problem.n / cfg.block_n) * problem.batch
    occ = _occupancy(cfg, arch)
    k_iters = math.ceil(math.ceil(problem.k / split) / cfg.block_k)
    t_iter = _k_step_us(cfg, problem, arch)
    latency_hiding = 1.0 + 0.15 * (occ - 1)
    slots = arch.sm_count * occ
    if cfg.family == "streamk":
        programs = min(tiles * k_iters, slots)
        per_program = math.ceil(tiles * k_iters / programs) * t_iter + CTA_OVERHEAD_US
        if cfg.align == 1:
            per_program *= UNALIGNED_SLOWDOWN
        total = per_program * occ / latency_hiding + 2 * LAUNCH_US
        return total + (FIXUP_PASSES * 4 * min(tiles, 2 * slots) * cfg.block_m * cfg.block_n
                        / (arch.hbm_gbps * 1e3))
    overhead = CTA_OVERHEAD_US * (PERSISTENT_OVERLAP if cfg.family in ("tma_persistent", "tma_ws") else 1.0)
    t_cta = k_iters * t_iter + overhead
    if cfg.align == 1:
        t_cta *= UNALIGNED_SLOWDOWN
    total = math.ceil(tiles * split / slots) * t_cta * occ / latency_hiding + LAUNCH_US
    if split > 1:   # fp32 partials written and read once; a separate reduce is one launch more
        ws_bytes = 2 * 4 * problem.m * problem.n * problem.batch * split
        total += ws_bytes / (arch.hbm_gbps * 1e3) + (LAUNCH_US if separate_reduce(cfg) else 0.0)
    return total


def separate_reduce(cfg: GemmConfig) -> bool:
    """Whether a split kernel sums its partials in a kernel of its own (splitk past SERIAL_SPLITS splits)
    rather than in its last-arriving program (split tma_persistent, splitk up to SERIAL_SPLITS)."""
    return cfg.family == "splitk" and not gemm_splitk.is_serial(cfg)


def _k_step_us(cfg: GemmConfig, problem: GemmProblem, arch: ArchSpec) -> float:
    """Time of one BLOCK_K step of one tile on one SM: tensor-core bound or operand-bandwidth bound."""
    in_bytes = DTYPES[problem.dtype].bytes
    # flop per µs
    peak = arch.peak_tflops_fp16 * 1e6 * (2.0 if problem.dtype in ("int8", "fp8e4m3") else 1.0)
    if problem.dtype in ("fp32",):
        peak /= 16.0
    elif problem.dtype == "tf32":
        peak /= 2.0
    sm_flops = peak / arch.sm_count * FAMILY_EFFICIENCY[cfg.family] * _tile_efficiency(cfg)
    sm_bytes = arch.hbm_gbps * 1e3 * L2_BANDWIDTH_FACTOR / arch.sm_count           # bytes per µs
    flops = 2.0 * cfg.block_m * cfg.block_n * cfg.block_k
    return max(flops / sm_flops, (cfg.block_m + cfg.block_n) * cfg.block_k * in_bytes / sm_bytes)


def padding_us(problem: GemmProblem, padded: GemmProblem, arch: ArchSpec) -> float:
    """Cost of running `problem` as `padded` (GemmProblem.padded): each operand whose sizes grow is copied
    (read + write, a copy kernel and a fill of its margin); C and D only when M or N grows (copied in). The
    output is never copied: without a caller's out the caller gets a view of the padded output
    (runtime/padding.py). Contiguous operands assumed: aligned ones are used in place; when no size grows
    (operands misaligned by their strides), A and B are counted."""
    in_b, out_b = DTYPES[problem.dtype].bytes, DTYPES[cast(str, problem.out_dtype)].bytes
    copied = [padded.m * padded.k * in_b if (padded.m, padded.k) != (problem.m, problem.k) else 0,
              padded.k * padded.n * in_b if (padded.k, padded.n) != (problem.k, problem.n) else 0]
    if (padded.m, padded.n) != (problem.m, problem.n):
        copied += [padded.m * padded.n * out_b] * (problem.epilogue.num_d + int(problem.epilogue.with_c))
    if not any(copied):   # same sizes: the plan exists for misaligned (strided) operands; count A and B
        copied = [padded.m * padded.k * in_b, padded.k * padded.n * in_b]
    moved = 2 * sum(copied) * padded.batch
    return moved / (arch.hbm_gbps * 1e3) + 2 * sum(1 for c in copied if c) * LAUNCH_US


def rank(kernels: list, problem: GemmProblem, arch: ArchSpec) -> list[tuple[object, float]]:
    """(kernel, estimated µs) sorted best first; ties keep registry order."""
    scored = [(kernel, estimate_us(kernel.config, problem, arch)) for kernel in kernels]
    return sorted(scored, key=lambda pair: pair[1])
