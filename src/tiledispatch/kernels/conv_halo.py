"""Family `direct`, kloop 'halo': depthwise 2-D convolutions (fwd, bwd_data, bwd_weight) whose filter window
slides along W in registers (issue 38: the 7x7 layers, where the roll walk of kernels/conv_roll.py spills).

A program owns one image, block_m consecutive written rows, HALO_COLS consecutive written columns and block_n
channels: one [block_m, block_n] fp32 accumulator tile per written column. Per filter row it loads the
(HALO_COLS - 1) * stride + block_k source columns of its halo once each (masked loads: zero is the padding),
converts each once and adds it into every written column whose window holds it, with that filter row's
block_k weight vectors (from conv_direct's tap-major fp32 repack). bwd_data is the same walk over dy with the
filter flipped along W (read flipped from the repack) and padding flt_w - 1 - pad_w. Filters up to block_k
wide (narrower ones get zero weights), any height and dilation along H; fwd: any stride along H, stride 1 or
2 along W (an entry each); bwd_data: stride 1. bwd_weight (stride 1): per filter row, the dy columns and the
x halo of a program's rows paired into block_k accumulator tiles; a program's sums are a split of
conv_direct's fp32 workspace, summed by its reduce. Design and compiler reports: docs/design/conv_direct.md.
"""
from __future__ import annotations

import math

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.dtypes import DTYPES
from tiledispatch.kernels import conv_direct, rules
from tiledispatch.kernels.conv_common import (
    REDUCE_KINDS,
    activation_line,
    cdiv,
    loop_range,
    reduce_grids,
    tl_type,
)
from tiledispatch.kernels.conv_direct import (
    PACK_BLOCK,
    SIDES,
    WORKSPACE_DTYPE,
    WS_PARAM,
    Side,
    base_params,
    channel_major_pids,
    channel_mask,
    header,
    indented,
    pack_body,
    pack_entry,
    reduce_body,
    reduce_entries,
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
FN = {"fwd": "conv_halo_fwd_s{}_kernel", "bwd_data": "conv_halo_dgrad_kernel",
      "bwd_weight": "conv_halo_wgrad_kernel"}   # {}: the stride along W
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
STRIDES = {"fwd": W_STRIDES, "bwd_data": (1,), "bwd_weight": (1,)}   # per direction, the strides along W
DEFAULT_SMS = 132           # bwd_weight's row plan when grid() gets no SM count (an H100 / H200)


def entries(cfg: ConvConfig) -> list[EntrySpec]:
    """fwd, bwd_data: the weight repack (conv_direct), then a compute entry per stride along W (STRIDES);
    bwd_weight: its partial-sum entry (ROWS written rows per program), then conv_direct's split reduce."""
    rows = (Param("ROWS", "i32"),) if cfg.direction == "bwd_weight" else ()
    params = (*base_params(cfg), WS_PARAM, *rows, Param("BLOCK_M", "constexpr", cfg.block_m),
              Param("BLOCK_N", "constexpr", cfg.block_n))
    computes = [EntrySpec(FN[cfg.direction].format(s), params, cfg.num_warps, cfg.num_stages)
                for s in _strides(cfg)]
    if cfg.direction == "bwd_weight":
        return computes + reduce_entries(cfg)
    return [pack_entry(cfg)] + computes


def _strides(cfg: ConvConfig) -> tuple[int, ...]:
    return STRIDES[cfg.direction]


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


# -- backward weight -------------------------------------------------------------------------------------
# dw[c, fh, f] = sum of dy[n, c, oh, ow] * x[n, c, oh - pad_h + fh * dil_h, ow - pad_w + f]
def _wgrad_program() -> list[str]:
    """Image nb, rows oh0 .. oh_hi (ROWS of them, the last chunk cut at the height), first column col0 and
    channels rn of dy; the program's index is its split of the workspace."""
    return [*channel_major_pids("K"), "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
            f"strips = (out_w + {HALO_COLS - 1}) // {HALO_COLS}", "chunks = (out_h + ROWS - 1) // ROWS",
            "q = pid_m", f"col0 = (q % strips) * {HALO_COLS}", "q = q // strips",
            "oh0 = (q % chunks) * ROWS", "nb = q // chunks", "oh_hi = tl.minimum(oh0 + ROWS, out_h)",
            "x_base = nb.to(tl.int64) * sx_n", "y_base = nb.to(tl.int64) * sy_n + col0.to(tl.int64) * sy_w"]


def _wgrad_rows(cfg: ConvConfig) -> list[str]:
    """One block of BLOCK_M dy rows at filter row fh: the HALO_COLS dy columns (dv_<j>), then each x halo
    column c loaded once and multiplied into every filter column f whose pair (dy column c - f) exists."""
    out = ["oh = r0 + tl.arange(0, BLOCK_M)", "m_ok = oh < oh_hi", "ih = oh - pad_h + fh * dil_h",
           "r_ok = m_ok & (ih >= 0) & (ih < in_h)",
           f"yp = y_ptr + ({vec(cfg, 'y_base + oh.to(tl.int64) * sy_h')}[:, None] + rn[None, :])"]
    for j in range(HALO_COLS):
        out += ["yp += sy_w"] if j else []
        out.append(f"dv_{j} = tl.load(yp, mask=(m_ok & jok_{j})[:, None] & n_ok[None, :], "
                   "other=0.0).to(tl.float32)")
    out.append(f"xp = x_ptr + ({vec(cfg, 'x_base + ih.to(tl.int64) * sx_h + co')}[:, None] + rn[None, :])")
    for c in range(halo_columns(cfg, 1)):
        out += ["xp += sx_w"] if c else []
        out.append(f"xv = tl.load(xp, mask=(r_ok & cok_{c})[:, None] & n_ok[None, :], "
                   "other=0.0).to(tl.float32)")
        out += [f"acc_{f} += dv_{c - f} * xv" for f in range(cfg.block_k) if 0 <= c - f < HALO_COLS]
    return out


def _wgrad_body(cfg: ConvConfig) -> str:
    """Per filter row fh: block_k accumulator tiles over the program's row blocks, then their column sums
    into its split of the workspace ws[SPLIT, taps, K] (filter columns past flt_w not stored)."""
    side = SIDES["bwd_weight"]
    columns = [line for line in _columns(cfg, side, 1) if not line.startswith("wp =")]
    stores = [f"tl.store(ws_ptr + ((split * taps + fh * flt_w + {f}) * K + rn), tl.sum(acc_{f}, axis=0), "
              f"mask=n_ok{f' & ({f} < flt_w)' if f else ''})" for f in range(cfg.block_k)]
    return (stride_hints(cfg) + indented(*_wgrad_program()) + channel_mask(cfg, "K")
            + indented(*columns, *(f"jok_{j} = col0 + {j} < out_w" for j in range(HALO_COLS)),
                       "taps = flt_h * flt_w", "split = pid_m.to(tl.int64)", "for fh in range(0, flt_h):")
            + indented(*(f"acc_{f} = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"
                         for f in range(cfg.block_k)),
                       f"for r0 in {loop_range(cfg, 'oh0', 'oh_hi', 'BLOCK_M')}:", level=2)
            + indented(*_wgrad_rows(cfg), level=3) + indented(*stores, level=2))


def render(cfg: ConvConfig) -> str:
    if cfg.direction == "bwd_weight":
        bodies = [_wgrad_body(cfg)] + [reduce_body(cfg, kind) for kind in REDUCE_KINDS]
    else:
        bodies = [pack_body(cfg)] + [_body(cfg, s) for s in _strides(cfg)]
    return "\n\n".join(header(spec) + body for spec, body in zip(entries(cfg), bodies))


# -- launch ----------------------------------------------------------------------------------------------
def rows_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> tuple[int, int]:
    """bwd_weight: (ROWS, row chunks): the dy rows cut into equal chunks of whole row blocks, as many as keep
    conv_direct.PROGRAMS_PER_SM programs per SM (each chunk x strip x image a split of the workspace)."""
    blocks = cdiv(problem.output[0], cfg.block_m)
    layer = problem.n * cdiv(problem.output[1], HALO_COLS) * cdiv(problem.k, cfg.block_n)
    chunks = max(1, min(blocks, cdiv(max(1, sms) * conv_direct.PROGRAMS_PER_SM, layer)))
    per_chunk = cdiv(blocks, chunks)
    return per_chunk * cfg.block_m, cdiv(blocks, per_chunk)


def grid(cfg: ConvConfig, problem: ConvProblem, sms: int = DEFAULT_SMS) -> tuple[int, int, int]:
    """(images x row blocks x column strips of the written tensor) x channel tiles on axis 0, channel tiles
    fastest; bwd_weight: row chunks of rows_plan instead of row blocks."""
    if cfg.direction == "bwd_weight":
        _, chunks = rows_plan(cfg, problem, sms)
        strips = cdiv(problem.output[1], HALO_COLS)
        return problem.n * chunks * strips * cdiv(problem.k, cfg.block_n), 1, 1
    bwd = cfg.direction == "bwd_data"
    height, width = problem.spatial if bwd else problem.output
    programs = problem.n * cdiv(height, cfg.block_m) * cdiv(width, HALO_COLS)
    return programs * cdiv(problem.c if bwd else problem.k, cfg.block_n), 1, 1


def launch_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> LaunchPlan:
    taps_k = math.prod(problem.filter) * problem.k
    main = grid(cfg, problem, sms)
    if cfg.direction == "bwd_weight":   # every (image, row chunk, strip) is a split of the reduction
        rows, chunks = rows_plan(cfg, problem, sms)
        split = problem.n * chunks * cdiv(problem.output[1], HALO_COLS)
        return LaunchPlan((main, *reduce_grids(taps_k, sms)), scalars=(("ROWS", rows), ("SPLIT", split)),
                          workspaces=(("ws_ptr", split * taps_k, WORKSPACE_DTYPE),))
    computes = tuple(main if s == problem.stride[-1] else (0, 1, 1) for s in _strides(cfg))
    return LaunchPlan(((cdiv(taps_k, PACK_BLOCK), 1, 1), *computes),
                      workspaces=(("ws_ptr", taps_k, WORKSPACE_DTYPE),))


# -- rules ---------------------------------------------------------------------------------------------------
def _per_thread(cfg: ConvConfig) -> int:
    return cfg.block_m * cfg.block_n // (32 * max(cfg.num_warps, 1))


def config_errors(cfg: ConvConfig, arch: ArchSpec, errors: rules.Errors) -> None:
    """The direct family's tile and block_k rules (block_k: the window width, filter columns, in every
    direction: checked as fwd's unroll, not as the tap loop's bwd_weight chunk), 2-D only, at most
    MAX_VALUES_PER_THREAD accumulator and weight (bwd_weight: dy) values per thread, shared memory of the
    stages; bwd_weight splits by its programs (split_k 0)."""
    per_thread = conv_direct.tile_errors(cfg, errors)
    if cfg.direction not in DIRECTIONS:
        errors.append(("direction", f"kloop 'halo' computes directions {DIRECTIONS}, not {cfg.direction!r}"))
    if cfg.ndim != 2:
        errors.append(("ndim", f"kloop 'halo' slides along W of 2-D images, not ndim={cfg.ndim}"))
    if cfg.direction == "bwd_weight" and cfg.split_k not in (0, 1):
        errors.append(("split_k", ("kloop 'halo' splits bwd_weight by its programs; split_k must be 0, got "
                                   f"{cfg.split_k}")))
    values = (HALO_COLS + cfg.block_k) * per_thread
    held = (f"{cfg.block_k} accumulator tiles and {HALO_COLS} dy tiles" if cfg.direction == "bwd_weight"
            else f"{HALO_COLS} accumulator tiles and {cfg.block_k} weight vectors")
    if values > MAX_VALUES_PER_THREAD:
        errors.append(("num_warps", (f"kloop 'halo' keeps {held} of a {cfg.block_m}x{cfg.block_n} tile: "
                                     f"{values} values per thread with {cfg.num_warps} warps "
                                     f"(max {MAX_VALUES_PER_THREAD})")))
    conv_direct.shared_memory_errors(cfg, arch, resources(cfg).shared_memory, errors)


def resources(cfg: ConvConfig) -> Resources:
    """HALO_COLS accumulator tiles (bwd_weight: block_k); shared memory (an upper estimate): num_stages - 1
    buffers of what one pipelined trip loads, the widest entry's halo columns (fwd: stride 2) of [block_m,
    block_n] and block_k fp32 weight vectors (bwd_weight: the halo and HALO_COLS dy tiles)."""
    tile = cfg.block_m * cfg.block_n * DTYPES[cfg.dtype].bytes if cfg.dtype in DTYPES else 0
    halo = halo_columns(cfg, max(_strides(cfg))) * tile
    if cfg.direction == "bwd_weight":
        trip, tiles = halo + HALO_COLS * tile, cfg.block_k
    else:
        trip, tiles = halo + cfg.block_k * cfg.block_n * 4, HALO_COLS
    return Resources(max(0, cfg.num_stages - 1) * trip, tiles * _per_thread(cfg), cfg.num_warps)


def problem_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """Depthwise, the filter at most block_k wide, dilation 1 along W, fwd stride W_STRIDES along W, bwd_data
    and bwd_weight stride 1; then the direct family's rules."""
    if problem.c_per_group != 1 or problem.k_per_group != 1:
        return (f"c_per_group: kloop 'halo' computes depthwise convolutions (C/G = K/G = 1); the problem has "
                f"C/G={problem.c_per_group}, K/G={problem.k_per_group}")
    if problem.filter[-1] > cfg.block_k:
        return (f"filter: kloop 'halo' slides a window of {cfg.block_k} filter columns; the problem's filter "
                f"{problem.filter} is wider")
    if cfg.direction == "bwd_data" and problem.stride != (1, 1):
        return (f"stride: kloop 'halo' computes bwd_data at stride 1 only (strided bwd_data: kloop 'tap', "
                f"whose grid has a layer per stride phase), got {problem.stride}")
    if cfg.direction == "bwd_weight" and problem.stride != (1, 1):
        return f"stride: kloop 'halo' computes bwd_weight at stride 1 only, got {problem.stride}"
    if problem.stride[-1] not in W_STRIDES:
        return f"stride: kloop 'halo' slides along W with stride 1 or 2, got {problem.stride}"
    if problem.dilation[-1] != 1:
        return f"dilation: kloop 'halo' needs dilation 1 along W, got {problem.dilation}"
    return conv_direct.problem_mismatch(cfg, problem)
