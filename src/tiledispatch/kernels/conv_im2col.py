"""Family `gemm`, kloop `im2col`: a convolution of one group as an explicit column workspace plus a GEMM.

fwd / bwd_weight copy the columns (cols[p, tap*C + c]) into a workspace, then run the tma_persistent GEMM;
bwd_data runs the GEMM into the workspace, then gathers it into dx (col2im). 1x1 convolutions at stride 1
without padding skip the copy; align 1 pads the workspace rows (and repacks the weight) to 16 bytes. Design:
docs/design/conv_gemm.md.
"""
from __future__ import annotations

import math
from typing import Any

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.dtypes import DTYPES
from tiledispatch.errors import BadInput
from tiledispatch.kernels import conv_gemm, gemm_tma, rules
from tiledispatch.kernels.conv_common import (
    dims,
    fast_divisor_params,
    fast_divisor_scalars,
    fast_split_index,
    multiple_hints,
    phase_lines,
    phase_rows,
    split_index,
    tap_coords,
    tl_type,
)
from tiledispatch.kernels.conv_direct import header, indented, tap_loop_nest
from tiledispatch.kernels.spec import ALIGN_BYTES, EntrySpec, LaunchPlan, Param, Resources, aligned16
from tiledispatch.problems.conv import ConvProblem

FN = "conv_im2col_kernel"
GATHER_FN = "conv_col2im_kernel"
WPACK_FN = "conv_im2col_wpack_kernel"
WPACK_BLOCK = 1024
# Program tiles (constexpr name, value) of the copy and the gather by align: 64 pixels x a 64-channel run of
# one tap at align 8; align 1 copies 64 pixels x 64 flattened (tap, channel) columns (whole rows of a
# few-channel cols) and gathers 512 dx pixels of one channel (from the transposed dcols, coalesced along the
# pixels)
TILES = {8: (("BLOCK_P", 64), ("BLOCK_C", 64)), 1: (("BLOCK_P", 64), ("BLOCK_J", 64))}
GATHER_TILES = {8: TILES[8], 1: (("BLOCK_P", 512),)}
IM2COL_WARPS = 4
IM2COL_MAX_ELEMENTS = 2**28  # workspace bound: 512 MiB of 16-bit elements
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
LAYOUTS = {"fwd": "rcr", "bwd_data": "rrr", "bwd_weight": "crr"}
# The GEMM operand cols is (the copy writes, the gather reads, the workspace under this parameter name)
COLS = {"fwd": "a_ptr", "bwd_data": "out_ptr", "bwd_weight": "b_ptr"}
# Per-call tensors of the GEMM operands by conv slot (x 0, w 1, y 2, bias 3). The cols operand maps to x: a
# 1x1 convolution at stride 1 without padding (`reads_x`) reads x's pixel rows (bwd_data: writes dx's);
# otherwise the workspace binding wins (so does the repacked weight's at align 1, `packed_weight`)
SLOTS = {"fwd": {"x_ptr": 0, "w_ptr": 1, "a_ptr": 0, "b_ptr": 1, "out_ptr": 2, "bias_ptr": 3},
         "bwd_data": {"x_ptr": 0, "w_ptr": 1, "a_ptr": 2, "b_ptr": 1, "out_ptr": 0},
         "bwd_weight": {"x_ptr": 0, "a_ptr": 2, "b_ptr": 0, "out_ptr": 1}}
# bwd_data at align 1 (`transposed`): dcolsT = w^T @ dy^T, so the GEMM's A is the repacked weight and B is dy
TRANSPOSED_SLOTS = {"x_ptr": 0, "w_ptr": 1, "a_ptr": 1, "b_ptr": 2}


def transposed(cfg: ConvConfig) -> bool:
    """bwd_data at align 1 keeps dcols transposed (taps*C rows of output pixels): the gather of a channel then
    reads consecutive pixels (a few-channel row layout would scatter it over 2-byte elements)."""
    return cfg.direction == "bwd_data" and cfg.align != 8


def packs_weight(cfg: ConvConfig) -> bool:
    """align 1 fwd / bwd_data read the weight through a repack into 16-byte rows (bwd_weight writes dw through
    its split epilogue's pointer stores, which take any row stride)."""
    return cfg.align != 8 and cfg.direction != "bwd_weight"


def gemm_config(cfg: ConvConfig) -> GemmConfig:
    """The GEMM instance over cols (every field derives from the conv config's; fwd carries its epilogue)."""
    layout = "ccr" if transposed(cfg) else LAYOUTS.get(cfg.direction, "crr")
    return GemmConfig(family="tma_persistent", layout=layout, split_k=cfg.split_k,
                      dtype=cfg.dtype, out_dtype=cfg.out_dtype if cfg.direction != "bwd_data" else cfg.dtype,
                      acc_dtype=cfg.acc_dtype, block_m=cfg.block_m, block_n=cfg.block_n, block_k=cfg.block_k,
                      num_warps=cfg.num_warps, num_stages=cfg.num_stages, group_m=8, align=16,
                      activation=cfg.activation, bias="col" if cfg.bias else "none")


def _tiles(cfg: ConvConfig) -> tuple[tuple[str, int], ...]:
    table = GATHER_TILES if cfg.direction == "bwd_data" else TILES
    return table.get(cfg.align, table[1])


def _copy_params(cfg: ConvConfig) -> list[Param]:
    """x (read by the copy, written by the gather), the workspace, C, the batch NB (the launch's N is the
    GEMM's), the workspace's row stride WS_ROW, the pixel count the program grid covers (output pixels for the
    copy, dx pixels for the gather), every dim's sizes and x's strides, the tile."""
    ty = "*" + DTYPES[cfg.dtype].triton
    aligned = cfg.align == 8
    x_ty = "*" + DTYPES[cfg.out_dtype if cfg.direction == "bwd_data" else cfg.dtype].triton
    out = [Param("x_ptr", x_ty, divisibility=aligned16(aligned)),
           Param(_cols(cfg), ty, divisibility=ALIGN_BYTES), Param("C", "i32"), Param("NB", "i32"),
           Param("WS_ROW", "i32"), Param("P", "i32")]
    out += [Param(f"{field}_{s}", "i32") for field in ("in", "out", "flt", "str", "pad", "dil")
            for s in dims(cfg)]
    out += [Param("sx_n", "i64")] + [Param(f"sx_{s}", "i64") for s in dims(cfg)]
    if cfg.align != 8 and cfg.direction != "bwd_data":   # the flat copy's fast divisors
        out += fast_divisor_params(_flat_divisors(cfg))
    return out + [Param(name, "constexpr", value) for name, value in _tiles(cfg)]


def _flat_divisors(cfg: ConvConfig) -> tuple[str, ...]:
    """Names of the flat copy's fast divisors: C, the inner filter dims, the inner output dims."""
    ds = dims(cfg)
    return ("c", *(f"f{s}" for s in ds[1:]), *(f"o{s}" for s in ds))


def _wpack_entry(cfg: ConvConfig) -> EntrySpec:
    ty = "*" + DTYPES[cfg.dtype].triton
    params = (Param("w_ptr", ty), Param(packed_weight(cfg), ty, divisibility=ALIGN_BYTES),
              Param("W_ROWS", "i32"), Param("COLS", "i32"), Param("R", "i32"), Param("sw_k", "i64"),
              Param("BLOCK", "constexpr", WPACK_BLOCK))
    return EntrySpec(WPACK_FN, params, IM2COL_WARPS, 1)


def _cols(cfg: ConvConfig) -> str:
    return COLS.get(cfg.direction, "b_ptr")


def packed_weight(cfg: ConvConfig) -> str:
    """The GEMM operand the align-1 weight repack writes (the workspace bound under that name)."""
    return "a_ptr" if transposed(cfg) else "b_ptr"


def entries(cfg: ConvConfig) -> list[EntrySpec]:
    """[weight repack (align 1)], then fwd / bwd_weight: the copy and the GEMM; bwd_data: the GEMM and the
    gather."""
    gemm = gemm_tma.entries(gemm_config(cfg))
    copy = EntrySpec(GATHER_FN if cfg.direction == "bwd_data" else FN, tuple(_copy_params(cfg)),
                     IM2COL_WARPS, 1)
    pack = [_wpack_entry(cfg)] if packs_weight(cfg) else []
    return [*pack, *gemm, copy] if cfg.direction == "bwd_data" else [*pack, copy, *gemm]


def _wpack_source(cfg: ConvConfig) -> str:
    """packed[k, j] = w[k, j] for the W_ROWS (output channels) x COLS weight matrix, into rows of R >= COLS
    elements (16-byte rows). Its own name for the row count: the values of a launch are shared by name with
    the GEMM, whose K is the reduction size."""
    return (header(_wpack_entry(cfg))
            + indented("e = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)", "k = e // COLS",
                       "j = e % COLS", "ok = k < W_ROWS",
                       f"tl.store({packed_weight(cfg)} + (k * R + j), tl.load(w_ptr + (k * sw_k + j), "
                       "mask=ok, other=0.0), mask=ok)"))


def _program_tile(cfg: ConvConfig, tiles_per_block: str) -> str:
    """rc (channels) and the program's block of BLOCK_P pixels, `tiles_per_block` programs per block."""
    hints = multiple_hints(["C"], 16) if cfg.align == 8 else []
    return indented(*hints, "c_tiles = (C + BLOCK_C - 1) // BLOCK_C", f"per_block = {tiles_per_block}",
                    "tile = tl.program_id(0) % per_block", "block = tl.program_id(0) // per_block",
                    "rc = (tile % c_tiles) * BLOCK_C + tl.arange(0, BLOCK_C)", "c_ok = rc < C",
                    "p = block * BLOCK_P + tl.arange(0, BLOCK_P)", "p_ok = p < P")


def _hint(cfg: ConvConfig, expr: str, unit: int) -> str:
    return f"tl.multiple_of({expr}, {unit})" if cfg.align == 8 else f"({expr})"


def _im2col_source(cfg: ConvConfig) -> str:
    ds = dims(cfg)
    taps = " * ".join(f"flt_{s}" for s in ds)
    inside = " & ".join(f"(i_{s} >= 0) & (i_{s} < in_{s})" for s in ds)
    src_off = "n.to(tl.int64) * sx_n + " + " + ".join(f"i_{s}.to(tl.int64) * sx_{s}" for s in ds)
    return (header(_copy_entry(cfg))
            + _program_tile(cfg, f"{taps} * c_tiles") + indented("tap = tile // c_tiles")
            + tap_coords(cfg, "tap", "    ")
            + split_index("q", "p", ["N"] + [f"out_{s}" for s in ds], ["n"] + [f"o_{s}" for s in ds], "    ")
            + indented(*(f"i_{s} = o_{s} * str_{s} - pad_{s} + f_{s} * dil_{s}" for s in ds),
                       f"ok = p_ok & {inside}", f"src = {_hint(cfg, src_off, 8)}",
                       "v = tl.load(x_ptr + src[:, None] + rc[None, :], mask=ok[:, None] & c_ok[None, :], "
                       "other=0.0)",
                       f"dst = {_hint(cfg, 'p.to(tl.int64) * WS_ROW + tap * C', 16)}",
                       f"tl.store({_cols(cfg)} + dst[:, None] + rc[None, :], v, mask=p_ok[:, None] & "
                       "c_ok[None, :])"))


def _col2im_source(cfg: ConvConfig) -> str:
    """bwd_data: dx pixel p = (n, i) sums, over the taps, dcols[(n, o), tap*C + c] where o*stride = i + pad -
    f*dil has an integral solution inside the output."""
    ds = dims(cfg)
    taps = " * ".join(f"flt_{s}" for s in ds)
    dst = "n.to(tl.int64) * sx_n + " + " + ".join(f"i_{s}.to(tl.int64) * sx_{s}" for s in ds)
    return (header(_copy_entry(cfg))
            + _program_tile(cfg, "c_tiles")
            + split_index("q", "p", ["N"] + [f"in_{s}" for s in ds], ["n"] + [f"i_{s}" for s in ds], "    ")
            + indented("acc = tl.zeros((BLOCK_P, BLOCK_C), dtype=tl.float32)",
                       f"for tap in range(0, {taps}):")
            + tap_coords(cfg, "tap", "        ")
            + indented("ok = p_ok", "o = n", *_reach(cfg),
                       f"src = {_hint(cfg, 'o.to(tl.int64) * WS_ROW + tap * C', 16)}",
                       f"v = tl.load({_cols(cfg)} + src[:, None] + rc[None, :], mask=ok[:, None] & "
                       "c_ok[None, :], other=0.0)", "acc += v.to(tl.float32)", level=2)
            + indented(f"dst = {_hint(cfg, dst, 8)}",
                       f"tl.store(x_ptr + dst[:, None] + rc[None, :], acc.to({tl_type(cfg.out_dtype)}), "
                       "mask=p_ok[:, None] & c_ok[None, :])"))


def _reach(cfg: ConvConfig) -> list[str]:
    """ok &= tap f reaches dx pixel i (o*stride = i + pad - f*dil integral, inside the output); o: the flat
    output pixel (n, o_<s>...)."""
    out = []
    for s in dims(cfg):
        out += [f"e_{s} = i_{s} + pad_{s} - f_{s} * dil_{s}", f"o_{s} = e_{s} // str_{s}",
                f"ok = ok & (e_{s} >= 0) & (e_{s} == o_{s} * str_{s}) & (o_{s} < out_{s})",
                f"o = o * out_{s} + o_{s}"]
    return out


def _im2col_flat_source(cfg: ConvConfig) -> str:
    """align 1: a program copies BLOCK_P pixels x BLOCK_J consecutive columns j = tap*C + c of cols (whole
    rows when the channels are few: coalesced stores, and loads along a filter row's contiguous run of x). The
    source offset splits into the image (int64, per pixel), the window's corner (per pixel) and the tap's
    shift and channel (per column), the last two int32 within one image (problem_mismatch bounds its
    elements), so an element costs an add, an unsigned compare per dim and its address; the column and pixel
    index splits divide through fast divisors (launch scalars dm_/ds_: c, f<s>, o<s>)."""
    ds = dims(cfg)
    taps = " * ".join(f"flt_{s}" for s in ds)
    inside = " & ".join(f"((c_{s}[:, None] + d_{s}[None, :]).to(tl.uint32) < in_{s}.to(tl.uint32))"
                        for s in ds)
    corner = " + ".join(f"c_{s} * sx_{s}.to(tl.int32)" for s in ds)
    shift = " + ".join([f"d_{s} * sx_{s}.to(tl.int32)" for s in ds] + ["c"])
    return (header(_copy_entry(cfg))
            + indented(f"cols = {taps} * C", "j_tiles = (cols + BLOCK_J - 1) // BLOCK_J",
                       "block = tl.program_id(0) // j_tiles",
                       "j = (tl.program_id(0) % j_tiles) * BLOCK_J + tl.arange(0, BLOCK_J)",
                       "j_ok = j < cols")
            + fast_split_index("j", ["", "C"], ["", "c"], ["tap", "c"], "    ")
            + fast_split_index("tap", [f"flt_{s}" for s in ds], [f"f{s}" for s in ds], [f"f_{s}" for s in ds],
                               "    ")
            + indented(*(f"d_{s} = f_{s} * dil_{s}" for s in ds), f"shift = {shift}",
                       "p = block * BLOCK_P + tl.arange(0, BLOCK_P)", "p_ok = p < P")
            + fast_split_index("p", ["N"] + [f"out_{s}" for s in ds], [""] + [f"o{s}" for s in ds],
                               ["n"] + [f"o_{s}" for s in ds], "    ")
            + indented(*(f"c_{s} = o_{s} * str_{s} - pad_{s}" for s in ds),
                       "image = x_ptr + n.to(tl.int64) * sx_n", f"corner = {corner}",
                       f"ok = p_ok[:, None] & j_ok[None, :] & {inside}",
                       "v = tl.load(image[:, None] + (corner[:, None] + shift[None, :]), mask=ok, other=0.0)",
                       f"row = {_cols(cfg)} + p.to(tl.int64) * WS_ROW",
                       "tl.store(row[:, None] + j[None, :], v, mask=p_ok[:, None] & j_ok[None, :])"))


def _col2im_transposed_source(cfg: ConvConfig) -> str:
    """align 1: a program sums, for BLOCK_P dx pixels of one channel c and one stride phase (program_id(2):
    the residues r_<s> of the pixel coordinates modulo the stride), dcolsT[tap*C + c, (n, o)] over the taps.
    Within a phase a filter coordinate reaches every pixel or none (o = u + (r + pad - f*dil) / stride for the
    pixel's sub-grid coordinate u), so the loops over the filter dims skip those that reach none and no pixel
    divides; consecutive pixels read consecutive output pixels of a dcolsT row."""
    ds = dims(cfg)
    sub = ["NB"] + [f"sub_{s}" for s in ds]
    dst = " + ".join(["n.to(tl.int64) * sx_n"] + [f"i_{s}.to(tl.int64) * sx_{s}" for s in ds] + ["c"])

    def tap_lines(s: str, ok: str, row: str) -> list[str]:   # a filter coordinate off the phase is skipped
        return [f"e_{s} = r_{s} + pad_{s} - f_{s} * dil_{s}", f"if e_{s} % str_{s} == 0:",
                f"o_{s} = u_{s} + e_{s} // str_{s}", f"ok_{s} = {ok} & (o_{s} >= 0) & (o_{s} < out_{s})",
                f"ro_{s} = {row} * out_{s} + o_{s}"]

    loops, ok, row, tap, level = tap_loop_nest(cfg, tap_lines, "p_ok", "n", 1, pipelined=False)
    loops += indented(f"v = tl.load({_cols(cfg)} + (({tap} * C + c).to(tl.int64) * WS_ROW + {row}), "
                      f"mask={ok}, other=0.0)", "acc += v.to(tl.float32)", level=level)
    return (header(_copy_entry(cfg))
            + indented("c = tl.program_id(0) % C", "p = (tl.program_id(0) // C) * BLOCK_P + tl.arange(0, "
                                                   "BLOCK_P)")
            + indented(*phase_lines(ds, "p", "p_ok", "NB"))
            + split_index("q", "p", sub, ["n"] + [f"u_{s}" for s in ds], "    ")
            + indented(*(f"i_{s} = u_{s} * str_{s} + r_{s}" for s in ds), "acc = tl.zeros((BLOCK_P,), "
                                                                          "dtype=tl.float32)")
            + loops
            + indented(f"tl.store(x_ptr + ({dst}), acc.to({tl_type(cfg.out_dtype)}), mask=p_ok)"))


def _copy_entry(cfg: ConvConfig) -> EntrySpec:
    return next(e for e in entries(cfg) if e.fn in (FN, GATHER_FN))


def render(cfg: ConvConfig) -> str:
    gemm = gemm_tma.render(gemm_config(cfg))
    aligned = cfg.align == 8
    if cfg.direction == "bwd_data":
        parts = [_col2im_source(cfg) if aligned else _col2im_transposed_source(cfg)]
    else:
        parts = [_im2col_source(cfg) if aligned else _im2col_flat_source(cfg)]
    parts = [gemm, *parts] if cfg.direction == "bwd_data" else [*parts, gemm]
    return "\n\n".join(([_wpack_source(cfg)] if packs_weight(cfg) else []) + parts)


def pixels(problem: ConvProblem) -> int:
    return problem.n * math.prod(problem.output)


def sizes(problem: ConvProblem, cfg: ConvConfig | None = None) -> tuple[int, int, int]:
    """(M, N, K) of the GEMM: fwd pixels x output channels x taps*input channels; bwd_data pixels x taps*input
    channels x output channels (transposed at align 1); bwd_weight output channels x taps*input channels x
    pixels."""
    cols = math.prod(problem.filter) * problem.c
    if problem.direction == "fwd":
        return pixels(problem), problem.k, cols
    if problem.direction == "bwd_data":
        if cfg and transposed(cfg):
            return cols, pixels(problem), problem.k
        return pixels(problem), cols, problem.k
    return problem.k, cols, pixels(problem)


def reads_x(problem: ConvProblem) -> bool:
    """A 1x1 convolution at stride 1 without padding: cols is x (dx) itself (N x pixels rows of C)."""
    return (all(f == 1 for f in problem.filter) and all(s == 1 for s in problem.stride)
            and all(p == (0, 0) for p in problem.padding))


def row_elements(problem: ConvProblem) -> int:
    """The workspace's row stride: taps x C rounded up to 8 elements (16-byte rows for the tensor copies)."""
    return -(-math.prod(problem.filter) * problem.c // 8) * 8


def _pixel_row(problem: ConvProblem) -> int:
    """The transposed dcols' row stride: the output pixels rounded up to 8 (16-byte rows)."""
    return -(-pixels(problem) // 8) * 8


def workspace_elements(problem: ConvProblem, cfg: ConvConfig | None = None) -> int:
    """Elements of the cols workspace (0 when the GEMM reads x itself)."""
    if reads_x(problem):
        return 0
    if cfg and transposed(cfg):
        return math.prod(problem.filter) * problem.c * _pixel_row(problem)
    return pixels(problem) * row_elements(problem)


def launch_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> LaunchPlan:
    m, n, k = sizes(problem, cfg)
    gemm = gemm_tma.launch_plan(gemm_config(cfg), m, n, k, 1, sms)
    tile = dict(_tiles(cfg))
    copied = problem.n * math.prod(problem.spatial) if problem.direction == "bwd_data" else pixels(problem)
    if "BLOCK_C" in tile:   # pixel blocks x (copy: taps x) channel runs
        taps = math.prod(problem.filter) if problem.direction != "bwd_data" else 1
        copy = (-(-copied // tile["BLOCK_P"]) * taps * -(-problem.c // tile["BLOCK_C"]), 1, 1)
    elif "BLOCK_J" in tile:   # pixel blocks x column blocks
        columns = math.prod(problem.filter) * problem.c
        copy = (-(-copied // tile["BLOCK_P"]) * -(-columns // tile["BLOCK_J"]), 1, 1)
    else:   # the largest stride phase's dx pixel blocks x channels, a grid layer per phase
        copy = (-(-phase_rows(problem) // tile["BLOCK_P"]) * problem.c, 1, math.prod(problem.stride))
    if reads_x(problem):   # an empty grid: the copy (gather) is not launched
        copy = (0, 1, 1)
    grids = (*gemm.grids, copy) if problem.direction == "bwd_data" else (copy, *gemm.grids)
    workspaces = () if reads_x(problem) else ((_cols(cfg), workspace_elements(problem, cfg), cfg.dtype),)
    scalars = gemm.scalars
    if cfg.align != 8 and problem.direction != "bwd_data":
        ds = dims(cfg)
        sizes_of = {"c": problem.c, **{f"f{s}": f for s, f in zip(ds, problem.filter)},
                    **{f"o{s}": o for s, o in zip(ds, problem.output)}}
        scalars = (*scalars, *fast_divisor_scalars({name: sizes_of[name] for name in _flat_divisors(cfg)}))
    if packs_weight(cfg):   # the weight in 16-byte rows, written first
        packed = problem.k * row_elements(problem)
        grids = ((-(-problem.k * math.prod(problem.filter) * problem.c // WPACK_BLOCK), 1, 1), *grids)
        workspaces += ((packed_weight(cfg), packed, cfg.dtype),)
    return LaunchPlan(grids, scalars=scalars, workspaces=(*workspaces, *gemm.workspaces),
                      counters=gemm.counters)


def slots(cfg: ConvConfig) -> dict[str, int]:
    return dict(TRANSPOSED_SLOTS if transposed(cfg) else SLOTS.get(cfg.direction, SLOTS["bwd_weight"]))


def extra_values(cfg: ConvConfig, problem: ConvProblem, tensors: dict[str, Any]) -> dict[str, Any]:
    """The GEMM's sizes and strides, the copy's (gather's) pixel count P and row stride R, the weight repack's
    sizes. fwd: A = cols, B = w^T, out = y; bwd_data: A = dy, B = w, out = dcols; bwd_weight: A = dy^T,
    B = cols, out = dw. At align 1 the GEMM's w is the repacked one (rows of R)."""
    m, n, k = sizes(problem, cfg)
    w = tensors["w"]
    _check_weight_rows(w, problem, 8 if cfg.align == 8 else 1)
    y_rows = _rows(tensors["y"], "output")
    cols_rows = _rows(tensors["x"], "input") if reads_x(problem) else row_elements(problem)
    w_rows = row_elements(problem) if packs_weight(cfg) else w.stride(0)
    copied = problem.n * math.prod(problem.spatial) if problem.direction == "bwd_data" else pixels(problem)
    ws_row = _pixel_row(problem) if transposed(cfg) else cols_rows
    values = {"M": m, "N": n, "K": k, "NB": problem.n, "P": copied, "R": row_elements(problem),
              "WS_ROW": ws_row, "W_ROWS": problem.k, "COLS": math.prod(problem.filter) * problem.c,
              "sw_k": w.stride(0), "alpha": 1.0, "stride_ab": 0, "stride_bb": 0, "stride_ob": 0}
    if problem.direction == "fwd":
        return {**values, "stride_ar": cols_rows, "stride_ac": 1, "stride_br": 1, "stride_bc": w_rows,
                "stride_or": y_rows, "stride_oc": 1, "stride_biasb": 0}
    if transposed(cfg):   # dcolsT (taps*C x P) = w^T (column-major, rows of R) @ dy^T (column-major)
        return {**values, "stride_ar": 1, "stride_ac": w_rows, "stride_br": 1, "stride_bc": y_rows,
                "stride_or": ws_row, "stride_oc": 1}
    if problem.direction == "bwd_data":
        return {**values, "stride_ar": y_rows, "stride_ac": 1, "stride_br": w_rows, "stride_bc": 1,
                "stride_or": cols_rows, "stride_oc": 1}
    return {**values, "stride_ar": 1, "stride_ac": y_rows, "stride_br": cols_rows, "stride_bc": 1,
            "stride_or": w.stride(0), "stride_oc": 1}


def _rows(t: Any, field: str) -> int:
    """The pixel stride of a channels-last activation the GEMM reads or writes as a matrix (16-byte rows)."""
    step = conv_gemm.pixel_stride(t, field)
    if step % 8:
        raise BadInput(f"{field} has strides {tuple(t.stride())}: the tensor-copy GEMM takes its pixels as "
                       "rows whose stride is a multiple of 8 elements (16 bytes)", field=field)
    return step


def _check_weight_rows(w: Any, problem: ConvProblem, unit: int) -> None:
    """The GEMM (align 1: the weight repack) reads (fwd, bwd_data) or writes (bwd_weight) w as a K x taps*C
    matrix: each output channel's (tap, c) elements contiguous, tap-major (a channels-last weight without
    gaps); align 8: rows 16 bytes apart."""
    expected, step = [], problem.c
    for size in reversed(problem.filter):
        expected.append(step)
        step *= size
    want = (1, *reversed(expected))
    have = tuple(w.stride())[1:]
    if have != want or w.stride(0) % unit:
        raise BadInput(f"weight has strides {tuple(w.stride())}: the im2col GEMM takes each output channel's "
                       f"taps x channels as one row (strides {want} after the first, a row stride that is a "
                       f"multiple of {unit}); pass a contiguous channels-last weight", field="weight")



# -- rules ---------------------------------------------------------------------------------------------------
IM2COL_SPLITS = tuple(s for s in (1, *rules.SPLIT_K) if s in rules.CONV_SPLIT_K)


def config_errors(cfg: ConvConfig, arch: ArchSpec, errors: rules.Errors) -> None:
    """A bf16 / fp16 forward or weight gradient through an im2col workspace and the tma_persistent GEMM, whose
    instance (split_k: its fixed split count, 1 forward) must be valid."""
    if cfg.direction not in DIRECTIONS:
        errors.append(("direction", (f"kloop 'im2col' computes {', '.join(DIRECTIONS)}, not "
                                     f"{cfg.direction!r}")))
    if cfg.dtype not in ("bf16", "fp16"):
        errors.append(("dtype", f"kloop 'im2col' runs a 16-bit GEMM; dtype {cfg.dtype!r} is not one"))
    if cfg.groups_per_program != 1:
        errors.append(("groups_per_program", (f"kloop 'im2col' needs groups_per_program=1, got "
                                              f"{cfg.groups_per_program}")))
    if cfg.align not in (1, 8):
        errors.append(("align", ("kloop 'im2col' takes align 8 (channel totals multiples of 16) or 1 (any "
                                 "input channel count, in workspace rows padded to 16 bytes); got "
                                 f"{cfg.align}")))
    elif cfg.align == 1 and cfg.direction == "bwd_weight" and cfg.split_k < 2:
        errors.append(("split_k", ("kloop 'im2col' bwd_weight at align 1 writes dw (rows of taps x C "
                                   "elements, not 16-byte aligned) through its split epilogue: split_k must "
                                   f"be >= 2, got {cfg.split_k}")))
    if cfg.split_k not in IM2COL_SPLITS:
        errors.append(("split_k", ("kloop 'im2col' splits the GEMM's reduction a fixed number of times (the "
                                   f"split reduce runs the epilogue), one of {IM2COL_SPLITS}; got "
                                   f"{cfg.split_k}")))
    if not errors and cfg.dtype in DTYPES and cfg.out_dtype in DTYPES:
        conv_gemm.gemm_errors(gemm_config(cfg), arch, errors)


def resources(cfg: ConvConfig) -> Resources:
    """The GEMM's (the copies hold no more)."""
    return gemm_tma.resources(gemm_config(cfg))


def problem_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """One group, align 8 channel totals multiples of 16 (align 1: output channels multiples of 8, a filter
    that needs the copy), a workspace within IM2COL_MAX_ELEMENTS, pixel counts (dx's too) within int32."""
    if problem.groups != 1:
        return f"groups: kloop 'im2col' computes one group, got groups={problem.groups}"
    if problem.n * math.prod(problem.spatial) > rules.INT32_LIMIT:
        return (f"spatial: N x input pixels ({problem.n * math.prod(problem.spatial)}) exceed the int32 "
                "pixel index")
    if cfg.align == 8 and (problem.c % 16 or problem.k % 16):
        return (f"c: kloop 'im2col' copies 16-byte channel runs and runs a GEMM over rows of multiples of 16 "
                f"elements; the problem has C={problem.c}, K={problem.k}")
    if problem.k % 8:
        return ("k: kloop 'im2col' runs a tensor-copy GEMM over the output channels as 16-byte rows; K must "
                f"be a multiple of 8, got {problem.k}")
    image = math.prod(problem.spatial) * problem.c
    if cfg.align != 8 and image > rules.INT32_LIMIT:
        return (f"spatial: kloop 'im2col' at align 1 offsets within one image in int32; an image of "
                f"{problem.spatial} x {problem.c} channels has {image} elements")
    if cfg.align != 8 and reads_x(problem):
        return ("filter: a 1x1 convolution at stride 1 without padding needs no im2col; kloop 'im2col' runs "
                "it at align 8 only (its GEMM reads or writes x's pixel rows)")
    workspace = workspace_elements(problem, cfg)
    if workspace > IM2COL_MAX_ELEMENTS:
        return (f"spatial: the im2col workspace would hold {workspace} elements, more than "
                f"{IM2COL_MAX_ELEMENTS}")
    m, n, _ = sizes(problem, cfg)
    if cfg.split_k > 1 and cfg.split_k * m * n > IM2COL_MAX_ELEMENTS:
        return (f"split_k: {cfg.split_k} fp32 partials of the {m} x {n} GEMM output would hold "
                f"{cfg.split_k * m * n} elements, more than {IM2COL_MAX_ELEMENTS}")
    if pixels(problem) > rules.INT32_LIMIT:
        return (f"spatial: N x output pixels ({pixels(problem)}) exceed the int32 pixel index of the im2col "
                "copy and GEMM")
    return None

# (block_m, block_n, block_k, warps, stages, split_k) per (direction, align): bwd_weight wide tiles for many
# columns (taps x C) and split reductions for few tiles; fwd / bwd_data the large-tile GEMM shapes (many
# pixels, K <= 512 output channels, 576-4608 columns for bwd_data; split reductions where few pixels leave
# most SMs without a tile: ResNet layer4's 3x3 at 7x7 pixels); align 1 narrow tiles for few channels (a
# 3-channel 7x7 stem: 147 columns, 64 output channels)
_FWD_TILES = ((128, 128, 64, 8, 4, 1), (128, 256, 64, 8, 3, 1), (128, 64, 64, 4, 4, 1),
              (64, 128, 64, 4, 4, 1), (128, 128, 64, 8, 3, 4), (64, 128, 64, 4, 4, 4), (128, 64, 64, 4, 4, 2),
              (64, 128, 64, 4, 4, 2), (128, 128, 64, 8, 4, 2))
_NARROW_TILES = ((128, 64, 64, 4, 4, 1), (128, 128, 64, 8, 4, 1), (64, 64, 64, 4, 4, 1))
_CANDIDATES = {
    ("bwd_weight", 8): ((128, 128, 64, 8, 3, 1), (128, 256, 64, 8, 3, 1), (128, 128, 64, 8, 3, 2),
                        (128, 128, 64, 8, 3, 4), (64, 128, 64, 4, 4, 4), (64, 128, 64, 4, 4, 16),
                        (128, 256, 64, 8, 3, 2), (64, 128, 64, 4, 4, 8), (64, 128, 64, 4, 4, 1),
                        (64, 128, 64, 4, 4, 2)),
    ("fwd", 8): _FWD_TILES, ("bwd_data", 8): _FWD_TILES,
    ("fwd", 1): _NARROW_TILES, ("bwd_data", 1): _NARROW_TILES,
    # a few-channel weight gradient (the stem: 64 x 147 over 400K pixels): always split, the reduce writes dw
    ("bwd_weight", 1): ((64, 128, 64, 4, 4, 32), (64, 64, 64, 4, 4, 32), (64, 128, 64, 4, 4, 64)),
}


def candidate_configs(dtype: str, ndim: int, direction: str = "bwd_weight") -> list[ConvConfig]:
    """Tiles for the presets of one direction (both aligns where they exist)."""
    return [ConvConfig(family="gemm", direction=direction, ndim=ndim, dtype=dtype, block_m=bm, block_n=bn,
                       block_k=bk, num_warps=w, num_stages=s, split_k=split, kloop="im2col", align=align)
            for (way, align), tiles in _CANDIDATES.items() if way == direction
            for bm, bn, bk, w, s, split in tiles]
