"""Family `direct`, kloop 'halofh': depthwise 2-D bwd_weight (stride 1) with the filter rows in the tile
(issue 38: the 7x7 layers, where kloop 'halo' bwd_weight, which walks the filter rows outermost and so loads
each dy row once per filter row, trails cuDNN).

The tile is [FH, BLOCK_N]: dim 0 is the filter row (FH, a power of two >= block_k; rows past the filter
masked), with block_k accumulators acc_s, one per filter column. A program owns one image, a chunk of ROWS dy
rows, a strip of block_m dy columns and BLOCK_N channels, and walks its dy rows one per trip: each dy column
loaded once and broadcast over the filter rows, each x halo column one masked [FH, BLOCK_N] load (zero fill is
the padding), acc_s += dy_(c - s) * x_c. Row fh of acc_s is the program's partial sum of tap (fh, s), stored
straight into its split of conv_direct's fp32 workspace, which conv_direct's reduce sums into dw.
Fields: block_m the strip, block_n the channels, block_k the window, align the load vector width, split_k the
programs per SM the row plan aims for (0: conv_direct.PROGRAMS_PER_SM). In no preset until the H200
measurement (tools/probe_halo_wgrad.py) decides; design notes in docs/design/conv_direct.md.
"""
from __future__ import annotations

import math

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.fields import choice
from tiledispatch.dtypes import DTYPES
from tiledispatch.kernels import conv_direct, rules
from tiledispatch.kernels.conv_common import REDUCE_KINDS, cdiv, loop_range, reduce_grids
from tiledispatch.kernels.conv_direct import (
    BLOCKS,
    WORKSPACE_DTYPE,
    WS_PARAM,
    base_params,
    channel_major_pids,
    channel_mask,
    header,
    indented,
    reduce_body,
    reduce_entries,
    stride_hints,
    vec,
)
from tiledispatch.kernels.spec import EntrySpec, LaunchPlan, Param, Resources
from tiledispatch.problems.conv import ConvProblem

FN = "conv_halofh_wgrad_kernel"
STRIPS = (4, 7, 8, 14, 16)  # dy columns per program (block_m; 7, 14: ConvNeXt widths 7 .. 56 in whole strips)
WINDOWS = (3, 5, 7)         # filter columns unrolled (block_k)
MAX_ACC_VALUES = 64         # block_k accumulators x values per thread of an [FH, block_n] tile
DEFAULT_SMS = 132           # the row plan when grid() gets no SM count (an H100 / H200)


def filter_rows(cfg: ConvConfig) -> int:
    """FH: the filter rows a tile holds, the power of two at or above the window block_k."""
    return 1 << max(0, cfg.block_k - 1).bit_length()


def halo_columns(cfg: ConvConfig) -> int:
    """x columns a program loads per dy row: the windows of its block_m dy columns."""
    return cfg.block_m + cfg.block_k - 1


def per_thread(cfg: ConvConfig) -> int:
    """Values per thread of one [FH, block_n] tile."""
    return filter_rows(cfg) * cfg.block_n // (32 * max(cfg.num_warps, 1))


def entries(cfg: ConvConfig) -> list[EntrySpec]:
    """The partial-sum entry (ROWS dy rows per program), then conv_direct's split reduce."""
    params = (*base_params(cfg), WS_PARAM, Param("ROWS", "i32"), Param("FH", "constexpr", filter_rows(cfg)),
              Param("BLOCK_N", "constexpr", cfg.block_n))
    return [EntrySpec(FN, params, cfg.num_warps, cfg.num_stages), *reduce_entries(cfg)]


# -- source ----------------------------------------------------------------------------------------------
# dw[c, fh, s] = sum of dy[n, c, oh, ow] * x[n, c, oh - pad_h + fh * dil_h, ow - pad_w + s]
def _program(cfg: ConvConfig) -> list[str]:
    """Image nb, dy rows oh0 .. oh_hi, first dy column col0, channels rn; the filter rows fh of the tile; the
    scalar masks of the strip's dy columns (jok_j) and x halo columns (cok_c). The program's index is its
    split of the workspace."""
    strip = cfg.block_m
    return [*channel_major_pids("K"), "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
            f"strips = (out_w + {strip - 1}) // {strip}", "chunks = (out_h + ROWS - 1) // ROWS",
            "q = pid_m", f"col0 = (q % strips) * {strip}", "q = q // strips",
            "oh0 = (q % chunks) * ROWS", "nb = q // chunks", "oh_hi = tl.minimum(oh0 + ROWS, out_h)",
            "fh = tl.arange(0, FH)", "fh_ok = fh < flt_h", "ic0 = col0 - pad_w",
            *(f"jok_{j} = col0 + {j} < out_w" for j in range(strip)),
            *(f"cok_{c} = (ic0 + {c} >= 0) & (ic0 + {c} < in_w)" for c in range(halo_columns(cfg))),
            "x_base = nb.to(tl.int64) * sx_n + ic0.to(tl.int64) * sx_w",
            "y_base = nb.to(tl.int64) * sy_n + col0.to(tl.int64) * sy_w"]


def _trip(cfg: ConvConfig) -> list[str]:
    """dy row oh: the x rows of every filter row (ih, r_ok), then per halo column c its dy vector (c <
    block_m, loaded just before the first use) and x tile, and acc_s += dv_(c - s) * x_c for the pairs in
    the strip. Both pointers step one column at a time (+= s<t>_w), as kloop 'halo' does (fewer live
    offsets)."""
    out = ["ih = oh - pad_h + fh * dil_h", "r_ok = fh_ok & (ih >= 0) & (ih < in_h)",
           f"yp = y_ptr + ({vec(cfg, 'y_base + sy_h.to(tl.int64) * oh')} + rn)",
           f"xp = x_ptr + ({vec(cfg, 'x_base + ih.to(tl.int64) * sx_h')}[:, None] + rn[None, :])"]
    for c in range(halo_columns(cfg)):
        if c < cfg.block_m:
            out += ["yp += sy_w"] if c else []
            out.append(_dy_load(c))
        out += ["xp += sx_w"] if c else []
        out.append(f"xv = tl.load(xp, mask=(r_ok & cok_{c})[:, None] & n_ok[None, :], "
                   "other=0.0).to(tl.float32)")
        out += [f"acc_{s} += dv_{c - s} * xv" for s in range(cfg.block_k) if 0 <= c - s < cfg.block_m]
    return out


def _dy_load(c: int) -> str:
    """dy column c of the strip as a [1, BLOCK_N] row, broadcast over the filter rows by the FMAs. Compiled
    for sm_90 (bf16 8x64 w2 a4, 8 values per thread: 2 filter rows per thread share the dy values): 898 SASS
    per trip, against 955 for a [BLOCK_N] vector expanded after the load (its layout conversion goes through
    shared memory) and 985 for a load of the broadcast [FH, BLOCK_N] pointer tile (every filter row loads the
    same dy again); 4 values per thread: the same code all three ways."""
    return f"dv_{c} = tl.load(yp[None, :], mask=(n_ok & jok_{c})[None, :], other=0.0).to(tl.float32)"


def _stores(cfg: ConvConfig) -> list[str]:
    """acc_s row fh -> ws[split, fh * flt_w + s, rn] (filter rows past flt_h, columns past flt_w not
    stored)."""
    out = ["taps = flt_h * flt_w", "split = pid_m.to(tl.int64)",
           "wrow = (split * taps + fh.to(tl.int64) * flt_w) * K"]
    for s in range(cfg.block_k):
        rows = "fh_ok" if s == 0 else f"fh_ok & ({s} < flt_w)"
        out.append(f"tl.store(ws_ptr + ((wrow + {s} * K)[:, None] + rn[None, :]), acc_{s}, "
                   f"mask=({rows})[:, None] & n_ok[None, :])")
    return out


def _body(cfg: ConvConfig) -> str:
    zeros = [f"acc_{s} = tl.zeros((FH, BLOCK_N), dtype=tl.float32)" for s in range(cfg.block_k)]
    return (stride_hints(cfg) + indented(*_program(cfg)) + channel_mask(cfg, "K")
            + indented(*zeros, f"for oh in {loop_range(cfg, 'oh0', 'oh_hi')}:")
            + indented(*_trip(cfg), level=2) + indented(*_stores(cfg)))


def render(cfg: ConvConfig) -> str:
    bodies = [_body(cfg)] + [reduce_body(cfg, kind) for kind in REDUCE_KINDS]
    return "\n\n".join(header(spec) + body for spec, body in zip(entries(cfg), bodies))


# -- launch ----------------------------------------------------------------------------------------------
def programs_per_sm(cfg: ConvConfig) -> int:
    return cfg.split_k if cfg.split_k > 0 else conv_direct.PROGRAMS_PER_SM


def rows_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> tuple[int, int]:
    """(ROWS, row chunks): the dy rows cut into equal chunks, as many as keep programs_per_sm programs per SM
    (each chunk x strip x image a split of the workspace)."""
    height = problem.output[0]
    layer = problem.n * cdiv(problem.output[1], cfg.block_m) * cdiv(problem.k, cfg.block_n)
    chunks = max(1, min(height, cdiv(max(1, sms) * programs_per_sm(cfg), layer)))
    rows = cdiv(height, chunks)
    return rows, cdiv(height, rows)


def splits(cfg: ConvConfig, problem: ConvProblem, sms: int) -> int:
    return problem.n * rows_plan(cfg, problem, sms)[1] * cdiv(problem.output[1], cfg.block_m)


def grid(cfg: ConvConfig, problem: ConvProblem, sms: int = DEFAULT_SMS) -> tuple[int, int, int]:
    """(images x row chunks x strips) x channel tiles on axis 0, channel tiles fastest."""
    return splits(cfg, problem, sms) * cdiv(problem.k, cfg.block_n), 1, 1


def launch_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> LaunchPlan:
    taps_k = math.prod(problem.filter) * problem.k
    rows, _ = rows_plan(cfg, problem, sms)
    split = splits(cfg, problem, sms)
    return LaunchPlan((grid(cfg, problem, sms), *reduce_grids(taps_k, sms)),
                      scalars=(("ROWS", rows), ("SPLIT", split)),
                      workspaces=(("ws_ptr", split * taps_k, WORKSPACE_DTYPE),))


# -- rules ---------------------------------------------------------------------------------------------------
def config_errors(cfg: ConvConfig, arch: ArchSpec, errors: rules.Errors) -> None:
    """bwd_weight 2-D only; strip block_m in STRIPS, window block_k in WINDOWS, block_n a power of two, one
    group per program; at least one and at most MAX_ACC_VALUES // block_k values per thread; shared memory
    of the stages."""
    if cfg.direction != "bwd_weight":
        errors.append(("direction", f"kloop 'halofh' computes bwd_weight, not {cfg.direction!r}"))
    if cfg.ndim != 2:
        errors.append(("ndim", f"kloop 'halofh' slides along W of 2-D images, not ndim={cfg.ndim}"))
    choice(errors, "block_m", cfg.block_m, STRIPS)
    choice(errors, "block_n", cfg.block_n, BLOCKS)
    choice(errors, "block_k", cfg.block_k, WINDOWS)
    if cfg.groups_per_program != 1:
        errors.append(("groups_per_program", ("family 'direct' vectorizes over channels; groups_per_program "
                                              f"must be 1, got {cfg.groups_per_program}")))
    values = per_thread(cfg)
    if values < 1 or cfg.block_k * values > MAX_ACC_VALUES:
        tile = f"[{filter_rows(cfg)}, {cfg.block_n}]"
        errors.append(("num_warps", (f"kloop 'halofh' holds {cfg.block_k} {tile} accumulator tiles: "
                                     f"{values} values per thread with {cfg.num_warps} "
                                     f"warps (1 to {MAX_ACC_VALUES // cfg.block_k})")))
    conv_direct.shared_memory_errors(cfg, arch, resources(cfg).shared_memory, errors)


def resources(cfg: ConvConfig) -> Resources:
    """block_k accumulator tiles; shared memory (an upper estimate): num_stages - 1 buffers of one trip's
    loads, the halo columns of [FH, block_n] and the strip's dy vectors."""
    size = DTYPES[cfg.dtype].bytes if cfg.dtype in DTYPES else 0
    trip = (halo_columns(cfg) * filter_rows(cfg) + cfg.block_m) * cfg.block_n * size
    return Resources(max(0, cfg.num_stages - 1) * trip, cfg.block_k * max(1, per_thread(cfg)), cfg.num_warps)


def problem_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """Depthwise, stride 1, dilation 1 along W, the filter at most block_k wide and FH high; then the direct
    family's rules."""
    if problem.c_per_group != 1 or problem.k_per_group != 1:
        return (f"c_per_group: kloop 'halofh' computes depthwise convolutions (C/G = K/G = 1); the problem "
                f"has C/G={problem.c_per_group}, K/G={problem.k_per_group}")
    if problem.filter[-1] > cfg.block_k or problem.filter[0] > filter_rows(cfg):
        return (f"filter: kloop 'halofh' holds {filter_rows(cfg)} filter rows of {cfg.block_k} columns; the "
                f"problem's filter {problem.filter} is larger")
    if problem.stride != (1, 1):
        return f"stride: kloop 'halofh' computes bwd_weight at stride 1 only, got {problem.stride}"
    if problem.dilation[-1] != 1:
        return f"dilation: kloop 'halofh' needs dilation 1 along W, got {problem.dilation}"
    return conv_direct.problem_mismatch(cfg, problem)
