"""Family `direct`, kloop 'halo': depthwise 2-D fwd and bwd_data convolutions whose filter window slides
along W in registers (issue 38: the 7x7 layers, where the roll walk of kernels/conv_roll.py spills).

A program owns one image, block_m consecutive written rows, HALO_COLS consecutive written columns and block_n
channels: one [block_m, block_n] fp32 accumulator tile per written column. Per filter row it loads the
(HALO_COLS - 1) * stride + block_k source columns of its halo once each (masked loads: zero is the padding),
converts each once and adds it into every written column whose window holds it, with that filter row's
block_k weight vectors (from conv_direct's tap-major fp32 repack). bwd_data is the same walk over dy with the
filter flipped along W (read flipped from the repack) and padding flt_w - 1 - pad_w. Filters up to block_k
wide (narrower ones get zero weights), any height and dilation along H; fwd: any stride along H, stride 1 or
2 along W (an entry each); bwd_data: stride 1. Design and compiler reports: docs/design/conv_direct.md.
"""
from __future__ import annotations

import dataclasses
import math

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.dtypes import DTYPES
from tiledispatch.kernels import conv_direct, rules
from tiledispatch.kernels.conv_common import activation_line, loop_range, tl_type
from tiledispatch.kernels.conv_direct import (
    PACK_BLOCK,
    WORKSPACE_DTYPE,
    WS_PARAM,
    base_params,
    channel_major_pids,
    channel_mask,
    header,
    indented,
    pack_body,
    pack_entry,
    stride_hints,
    vec,
)
from tiledispatch.kernels.spec import EntrySpec, LaunchPlan, Param, Resources
from tiledispatch.problems.conv import ConvProblem

HALO_COLS = 8               # output columns per program (per thread: its window slides over them)
W_STRIDES = (1, 2)          # the strides along W it is built for (an entry each)
# per thread: accumulators (HALO_COLS) and weight vectors (block_k) of block_m x block_n / threads values
# each; 2 channels per thread (the design's bf16 pair) hold 30 at block_k 7, 4 hold 60
MAX_VALUES_PER_THREAD = 64
FN = {"fwd": "conv_halo_fwd_s{}_kernel", "bwd_data": "conv_halo_dgrad_kernel"}   # {}: the stride along W
DIRECTIONS = ("fwd", "bwd_data")
STRIDES = {"fwd": W_STRIDES, "bwd_data": (1,)}   # per direction, the strides along W of its entries


@dataclasses.dataclass(frozen=True)
class Side:
    """The tensors of a direction: the one read (src) and the one written (dst), their extent prefixes, the
    channels."""

    src: str
    dst: str
    src_ext: str
    dst_ext: str
    channels: str


SIDES = {"fwd": Side("x", "y", "in", "out", "K"), "bwd_data": Side("y", "x", "out", "in", "C")}


def entries(cfg: ConvConfig) -> list[EntrySpec]:
    """The weight repack (conv_direct), then a compute entry per stride along W (STRIDES)."""
    params = (*base_params(cfg), WS_PARAM, Param("BLOCK_M", "constexpr", cfg.block_m),
              Param("BLOCK_N", "constexpr", cfg.block_n))
    return [pack_entry(cfg)] + [EntrySpec(FN[cfg.direction].format(s), params, cfg.num_warps, cfg.num_stages)
                                for s in _strides(cfg)]


def _strides(cfg: ConvConfig) -> tuple[int, ...]:
    return STRIDES.get(cfg.direction, W_STRIDES)


def halo_columns(cfg: ConvConfig, stride: int) -> int:
    """Input columns a program loads per filter row: the windows of HALO_COLS outputs at `stride`."""
    return (HALO_COLS - 1) * stride + cfg.block_k


# -- source ----------------------------------------------------------------------------------------------
def _program(side: Side) -> list[str]:
    """Image nb, written rows oh (m_ok within the height), first written column col0 and channels rn."""
    ext = side.dst_ext
    return [*channel_major_pids(side.channels), "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
            f"strips = ({ext}_w + {HALO_COLS - 1}) // {HALO_COLS}",
            f"row_blocks = ({ext}_h + BLOCK_M - 1) // BLOCK_M", "q = pid_m",
            f"col0 = (q % strips) * {HALO_COLS}", "q = q // strips",
            "oh = (q % row_blocks) * BLOCK_M + tl.arange(0, BLOCK_M)", "nb = q // row_blocks",
            f"m_ok = oh < {ext}_h", "x_base = nb.to(tl.int64) * sx_n", "y_base = nb.to(tl.int64) * sy_n"]


def _columns(cfg: ConvConfig, side: Side, stride: int) -> list[str]:
    """Per halo column c, whether its source column ic0 + c lies in the image (a scalar: every row of the
    tile shares it); the source offset of the first one, co; the weight pointers. bwd_data (stride 1): the
    flipped filter's window starts flt_w - 1 - pad_w columns left of the written column."""
    if cfg.direction == "bwd_data":
        out = ["ic0 = col0 + pad_w - (flt_w - 1)"]
    else:
        out = [f"ic0 = col0 * {stride} - pad_w" if stride > 1 else "ic0 = col0 - pad_w"]
    out += [f"cok_{c} = (ic0 + {c} >= 0) & (ic0 + {c} < {side.src_ext}_w)"
            for c in range(halo_columns(cfg, stride))]
    return out + [f"co = ic0.to(tl.int64) * s{side.src}_w", "wp = ws_ptr + rn[None, :]"]


def _source_rows(cfg: ConvConfig, side: Side) -> list[str]:
    """Filter row fh's source rows ih of the written rows oh, their mask r_ok. bwd_data (stride 1 along H):
    dy row oh + pad_h - fh * dil_h meets dx row oh through filter row fh, which needs no flip along H (the
    rows are summed in any order)."""
    row = "oh + pad_h - fh * dil_h" if cfg.direction == "bwd_data" else "oh * str_h - pad_h + fh * dil_h"
    return [f"ih = {row}", f"r_ok = m_ok & (ih >= 0) & (ih < {side.src_ext}_h)"]


def _weight_row(cfg: ConvConfig, f: int) -> str:
    """The packed-weight row of window slot f of filter row fh: fwd filter column f; bwd_data the filter
    flipped along W, column flt_w - 1 - f (masked past the filter's width either way)."""
    col = f"flt_w - {f + 1}" if cfg.direction == "bwd_data" else f"{f}"
    row = f"(fh * flt_w + {col}) * K"
    return f"tl.multiple_of({row}, {cfg.align})" if cfg.align > 1 else row


def _filter_row(cfg: ConvConfig, side: Side, stride: int) -> list[str]:
    """One filter row fh: its source rows, weight vectors, then each halo column loaded and added into the
    written columns j whose window holds it (window slot c - j * stride). The source pointers step one column
    at a time (xp += s<src>_w): offsets per column computed before the loop stay live in it (76 instead of 125
    registers for bf16 4x64 w4 fwd, a 64-bit offset pair per halo column)."""
    src = side.src
    out = [*_source_rows(cfg, side),
           f"xp = {src}_ptr + ({vec(cfg, f'{src}_base + ih.to(tl.int64) * s{src}_h + co')}[:, None] "
           "+ rn[None, :])"]
    for f in range(cfg.block_k):
        mask = "n_ok" if f == 0 else f"n_ok & ({f} < flt_w)"
        out.append(f"w_{f} = tl.load(wp + {_weight_row(cfg, f)}, mask=({mask})[None, :], other=0.0)")
    for c in range(halo_columns(cfg, stride)):
        out += [f"xp += s{src}_w"] if c else []
        out.append(f"xv = tl.load(xp, mask=(r_ok & cok_{c})[:, None] & n_ok[None, :], "
                   "other=0.0).to(tl.float32)")
        out += [f"acc_{j} += xv * w_{c - j * stride}" for j in range(HALO_COLS)
                if 0 <= c - j * stride < cfg.block_k]
    return out


def _epilogue(cfg: ConvConfig, side: Side) -> str:
    """Bias, activation (fwd) and the store of each written column within the width."""
    dst = side.dst
    out = indented(f"{dst}o = {dst}_base + oh.to(tl.int64) * s{dst}_h")
    if cfg.bias:
        out += indented("bias_v = tl.load(bias_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)[None, :]")
    for j in range(HALO_COLS):
        out += indented(f"yv = acc_{j} + bias_v" if cfg.bias else f"yv = acc_{j}")
        out += activation_line(cfg, "yv")
        off = vec(cfg, f"{dst}o + (col0 + {j}).to(tl.int64) * s{dst}_w")
        out += indented(f"tl.store({dst}_ptr + ({off}[:, None] + rn[None, :]), "
                        f"yv.to({tl_type(cfg.out_dtype)}), "
                        f"mask=(m_ok & (col0 + {j} < {side.dst_ext}_w))[:, None] & n_ok[None, :])")
    return out


def _body(cfg: ConvConfig, stride: int) -> str:
    side = SIDES[cfg.direction]
    zeros = [f"acc_{j} = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)" for j in range(HALO_COLS)]
    return (stride_hints(cfg) + indented(*_program(side)) + channel_mask(cfg, side.channels)
            + indented(*_columns(cfg, side, stride), *zeros, f"for fh in {loop_range(cfg, '0', 'flt_h')}:")
            + indented(*_filter_row(cfg, side, stride), level=2) + _epilogue(cfg, side))


def render(cfg: ConvConfig) -> str:
    bodies = [pack_body(cfg)] + [_body(cfg, s) for s in _strides(cfg)]
    return "\n\n".join(header(spec) + body for spec, body in zip(entries(cfg), bodies))


# -- launch ----------------------------------------------------------------------------------------------
def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def grid(cfg: ConvConfig, problem: ConvProblem) -> tuple[int, int, int]:
    """(images x row blocks x column strips of the written tensor) x channel tiles on axis 0, channel tiles
    fastest."""
    bwd = cfg.direction == "bwd_data"
    height, width = problem.spatial if bwd else problem.output
    programs = problem.n * _cdiv(height, cfg.block_m) * _cdiv(width, HALO_COLS)
    return programs * _cdiv(problem.c if bwd else problem.k, cfg.block_n), 1, 1


def launch_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> LaunchPlan:
    taps_k = math.prod(problem.filter) * problem.k
    main = grid(cfg, problem)
    computes = tuple(main if s == problem.stride[-1] else (0, 1, 1) for s in _strides(cfg))
    return LaunchPlan(((_cdiv(taps_k, PACK_BLOCK), 1, 1), *computes),
                      workspaces=(("ws_ptr", taps_k, WORKSPACE_DTYPE),))


# -- rules ---------------------------------------------------------------------------------------------------
def _per_thread(cfg: ConvConfig) -> int:
    return cfg.block_m * cfg.block_n // (32 * max(cfg.num_warps, 1))


def config_errors(cfg: ConvConfig, arch: ArchSpec, errors: rules.Errors) -> None:
    """The direct family's tile and block_k rules (block_k: the window width, filter columns), fwd and
    bwd_data 2-D only, at most MAX_VALUES_PER_THREAD accumulator and weight values per thread, shared memory
    of the stages."""
    per_thread = conv_direct.tile_errors(cfg, errors)
    if cfg.direction not in DIRECTIONS:
        errors.append(("direction", f"kloop 'halo' computes directions {DIRECTIONS}, not {cfg.direction!r}"))
    if cfg.ndim != 2:
        errors.append(("ndim", f"kloop 'halo' slides along W of 2-D images, not ndim={cfg.ndim}"))
    values = (HALO_COLS + cfg.block_k) * per_thread
    if values > MAX_VALUES_PER_THREAD:
        errors.append(("num_warps", (f"kloop 'halo' keeps {HALO_COLS} accumulator tiles and {cfg.block_k} "
                                     f"weight vectors of a {cfg.block_m}x{cfg.block_n} tile: {values} values "
                                     f"per thread with {cfg.num_warps} warps (max {MAX_VALUES_PER_THREAD})")))
    smem = resources(cfg).shared_memory
    if smem > arch.smem_per_block:
        errors.append(("num_stages", (f"{cfg.num_stages} pipelined stages of {cfg.name} need up to {smem} B "
                                      f"of shared memory; {arch.name} has {arch.smem_per_block} B per "
                                      "block")))


def resources(cfg: ConvConfig) -> Resources:
    """HALO_COLS accumulator tiles; shared memory (an upper estimate): num_stages - 1 buffers of what one
    filter row loads, the widest entry's halo columns (fwd: stride 2) of [block_m, block_n] and block_k fp32
    weight vectors."""
    tile = cfg.block_m * cfg.block_n * DTYPES[cfg.dtype].bytes if cfg.dtype in DTYPES else 0
    trip = halo_columns(cfg, max(_strides(cfg))) * tile + cfg.block_k * cfg.block_n * 4
    return Resources(max(0, cfg.num_stages - 1) * trip, HALO_COLS * _per_thread(cfg), cfg.num_warps)


def problem_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """Depthwise, the filter at most block_k wide, dilation 1 along W, fwd stride W_STRIDES along W, bwd_data
    stride 1; then the direct family's rules."""
    if problem.c_per_group != 1 or problem.k_per_group != 1:
        return (f"c_per_group: kloop 'halo' computes depthwise convolutions (C/G = K/G = 1); the problem has "
                f"C/G={problem.c_per_group}, K/G={problem.k_per_group}")
    if problem.filter[-1] > cfg.block_k:
        return (f"filter: kloop 'halo' slides a window of {cfg.block_k} filter columns; the problem's filter "
                f"{problem.filter} is wider")
    if cfg.direction == "bwd_data" and problem.stride != (1, 1):
        return (f"stride: kloop 'halo' computes bwd_data at stride 1 only (strided bwd_data: kloop 'tap', "
                f"whose grid has a layer per stride phase), got {problem.stride}")
    if problem.stride[-1] not in W_STRIDES:
        return f"stride: kloop 'halo' slides along W with stride 1 or 2, got {problem.stride}"
    if problem.dilation[-1] != 1:
        return f"dilation: kloop 'halo' needs dilation 1 along W, got {problem.dilation}"
    return conv_direct.problem_mismatch(cfg, problem)
