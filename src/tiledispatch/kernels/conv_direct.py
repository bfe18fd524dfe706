"""Family `direct`: depthwise and few-channels-per-group convolutions on CUDA cores (fp32 FMAs, no tl.dot),
vectorized over the contiguous channel axis, for every direction and ndim 1, 2, 3, walking the filter taps.

Each direction has a `dw` entry (depthwise: contiguous channel loads) and a `grouped` one and launches one of
them; fwd / bwd_data repack the weight tap-major first (entry `wpack`) unless the problem is small enough to
gather it (`dwg`); bwd_weight splits the pixel reduction into an fp32 workspace summed in split order. Design
and measurements: docs/design/conv_direct.md.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.fields import choice
from tiledispatch.dtypes import DTYPES
from tiledispatch.kernels import rules
from tiledispatch.kernels.conv_common import (
    REDUCE_KINDS,
    REDUCE_WARPS,
    activation_line,
    cdiv,
    dims,
    loop_range,
    multiple_hints,
    phase_lines,
    phase_rows,
    reduce_fns,
    reduce_grids,
    split_index,
    split_sum_lines,
    standard_params,
    tl_type,
)
from tiledispatch.kernels.gemm_common import signature_text
from tiledispatch.kernels.spec import ALIGN_BYTES, EntrySpec, LaunchPlan, Param, Resources
from tiledispatch.problems.conv import ConvProblem

KINDS = ("dw", "grouped")    # compute entries of every direction, in entry order (fwd / bwd_data: DATA_KINDS)
DATA_KINDS = ("dw", "dwg", "grouped")   # fwd / bwd_data: dwg = dw gathering its weights from w (no repack)
# depthwise fwd / bwd_data problems of at most this many filter taps and minimal bytes run `dwg`: the repack
# launch weighs more than the gathers there (H200, tune winners with and without the repack: 2-D 3x3 layers of
# 6-15 MB 5-15% faster gathering, 2-D ones of 36-96 MB and 3-D 3x3x3 ones 6-27% slower)
GATHER_MAX_TAPS = 9
GATHER_MAX_BYTES = 16 << 20
FN = {"fwd": "conv_direct_fwd_{}_kernel", "bwd_data": "conv_direct_dgrad_{}_kernel",
      "bwd_weight": "conv_direct_wgrad_{}_kernel"}
REDUCE_FN = "conv_direct_wgrad_reduce_kernel"
PACK_FN = "conv_direct_wpack_kernel"
PACK_BLOCK = 512
PACK_WARPS = 4
# the workspace of every direction: bwd_weight's partial sums; fwd / bwd_data's weight repacked tap-major and
# converted once, so the tap loop converts only the activations
WORKSPACE_DTYPE = "fp32"
WS_PARAM = Param("ws_ptr", "*" + DTYPES[WORKSPACE_DTYPE].triton, divisibility=ALIGN_BYTES)
PROGRAMS_PER_SM = 8         # bwd_weight: programs per SM the automatic split aims for
MAX_GRID_YZ = rules.MAX_GRID_YZ
BLOCKS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
UNROLL = (1, 2, 3, 4, 5, 7)      # fwd / bwd_data, and roll: innermost filter taps unrolled (block_k)
TAP_CHUNKS = (1, 3, 9)           # bwd_weight: filter taps accumulated per program (block_k)
MAX_WGRAD_ACC_PER_THREAD = 96    # bwd_weight and roll: accumulator tiles x values per thread (spills above)
KLOOPS = ("tap", "roll", "halo")   # one tile per tap, depthwise rows rolled (kernels/conv_roll.py), or a
                                   # depthwise window slid along W (kernels/conv_halo.py)
MAX_CG = 16                      # input channels per group it loops over (beyond: igemm's domain)
MAX_INDEX = 2 ** 30              # it indexes pixels and weight elements in int32


@dataclasses.dataclass(frozen=True)
class Side:
    """The tensors a depthwise row walk (kernels/conv_roll.py, conv_halo.py) of a direction reads (src) and
    writes (dst), their extent prefixes, the channels."""

    src: str
    dst: str
    src_ext: str
    dst_ext: str
    channels: str


SIDES = {"fwd": Side("x", "y", "in", "out", "K"), "bwd_data": Side("y", "x", "out", "in", "C"),
         "bwd_weight": Side("x", "y", "in", "out", "K")}   # bwd_weight walks dy like fwd's y
INDENT = "    "


# -- parameters ------------------------------------------------------------------------------------------
def base_params(cfg: ConvConfig) -> list[Param]:
    """The standard parameters; with align > 1 the activation pointers are 16-byte aligned."""
    aligned = ("x_ptr", "y_ptr") if cfg.align > 1 else ()
    return [dataclasses.replace(p, divisibility=ALIGN_BYTES) if p.name in aligned else p
            for p in standard_params(cfg)]


def kinds(direction: str) -> tuple[str, ...]:
    """The compute entries of a direction, in entry order."""
    return KINDS if direction == "bwd_weight" else DATA_KINDS


def tap_chunk(cfg: ConvConfig) -> int:
    """bwd_weight: filter taps accumulated at once (block_k), one [BLOCK_M, BLOCK_N] fp32 tile each; the dy
    tile is loaded once per chunk. 3 (a filter row of a 3x3 or 3x3x3 filter) measured best on most depthwise
    problems of the H200: 9 accumulators hold too many registers for the occupancy that hides the loads."""
    return cfg.block_k


def entries(cfg: ConvConfig) -> list[EntrySpec]:
    """fwd, bwd_data: weight pack, then the dw and grouped compute entries; bwd_weight: the dw and grouped
    partial-sum entries, then the reduce."""
    tiles = [Param("BLOCK_M", "constexpr", cfg.block_m), Param("BLOCK_N", "constexpr", cfg.block_n)]
    params = [*base_params(cfg), WS_PARAM]
    if cfg.direction == "bwd_weight":
        params += [Param("SPAN", "i32"), *tiles, Param("TAP_CHUNK", "constexpr", tap_chunk(cfg))]
    else:
        params += tiles
    out = [EntrySpec(FN[cfg.direction].format(kind), tuple(params), cfg.num_warps, cfg.num_stages)
           for kind in kinds(cfg.direction)]
    if cfg.direction == "bwd_weight":
        return out + reduce_entries(cfg)
    return [pack_entry(cfg)] + out


def reduce_entries(cfg: ConvConfig) -> list[EntrySpec]:
    """bwd_weight: the (wide, tall) entries that sum the partials ws[SPLIT, taps, C/G, K] and write dw
    (reduce_body)."""
    reduce = (*base_params(cfg), WS_PARAM, Param("SPLIT", "i32"))
    return [EntrySpec(fn, reduce, REDUCE_WARPS, 1) for fn in reduce_fns(REDUCE_FN)]


def pack_entry(cfg: ConvConfig) -> EntrySpec:
    """The entry that repacks the weight tap-major into the fp32 workspace (pack_body)."""
    return EntrySpec(PACK_FN, (*base_params(cfg), WS_PARAM, Param("BLOCK", "constexpr", PACK_BLOCK)),
                     PACK_WARPS, 1)


# -- shared source pieces ---------------------------------------------------------------------------------
def indented(*lines: str, level: int = 1) -> str:
    return "".join(f"{INDENT * level}{line}\n" for line in lines)


def header(entry: EntrySpec) -> str:
    return f"@triton.jit\ndef {entry.fn}(\n    {signature_text(list(entry.params))},\n):\n"


def vec(cfg: ConvConfig, row: str) -> str:
    """align a > 1: a row offset (pixel offset into x or y) is a multiple of a elements (strides are), so with
    a 16-byte aligned base and a BLOCK_N-aligned channel range the tile is a run of a-element vectors (16
    bytes for 16-bit dtypes at align 8; 4 and 8 bytes at align 2 and 4, for channel totals like 54 or 108)."""
    return f"tl.multiple_of({row}, [{cfg.align}])" if cfg.align > 1 else f"({row})"


def _pixels(cfg: ConvConfig, size: str) -> str:
    return " * ".join(["N"] + [f"{size}_{s}" for s in dims(cfg)])


def _decompose(cfg: ConvConfig, flat: str, size: str, level: int = 1) -> str:
    """p_<s> (coordinate in the {size}_<s> grid, innermost dim fastest) and nb (the image) of a flat index."""
    ds = dims(cfg)
    lines = [f"q = {flat}"]
    for s in reversed(ds[1:]):
        lines += [f"p_{s} = q % {size}_{s}", f"q = q // {size}_{s}"]
    lines += [f"p_{ds[0]} = q % {size}_{ds[0]}", f"nb = q // {size}_{ds[0]}"]
    return indented(*lines, level=level)


def _block_steps(cfg: ConvConfig, size: str, step: str) -> str:
    """Scalars st_<s> / st_n: the flat index step `step` written in the mixed radix of the {size}_<s> grid
    (innermost dim fastest), for _advance."""
    lines = [f"stp = {step}"]
    for s in reversed(dims(cfg)):
        lines += [f"st_{s} = stp % {size}_{s}", f"stp = stp // {size}_{s}"]
    return indented(*lines, "st_n = stp")


def _advance(cfg: ConvConfig, size: str, level: int) -> str:
    """Move the coordinates p_<s>, nb of _decompose on by the step of _block_steps: a digit-wise add with one
    carry per dim (each digit stays below twice its size, so one subtraction fixes it), instead of dividing
    the flat index again (four integer divisions per pixel in 2-D: the sm_90 loop of a 3-tap chunk shrinks
    from 445 to 378 instructions)."""
    lines, carry = [], ""
    for s in reversed(dims(cfg)):
        lines += [f"p_{s} = p_{s} + st_{s}{carry}", f"cy = (p_{s} >= {size}_{s}).to(tl.int32)",
                  f"p_{s} = p_{s} - cy * {size}_{s}"]
        carry = " + cy"
    return indented(*lines, f"nb = nb + st_n{carry}", level=level)


def _row_offset(cfg: ConvConfig, tensor: str, coord: str) -> str:
    """int64 element offset of pixel (nb, {coord}_<s>...) of x or y."""
    return " + ".join([f"nb.to(tl.int64) * s{tensor}_n"]
                      + [f"{coord}_{s}.to(tl.int64) * s{tensor}_{s}" for s in dims(cfg)])


def channel_mask(cfg: ConvConfig, channels: str) -> str:
    """n_ok; align a > 1: the channel total is a multiple of a, so the mask is constant over each vector."""
    out = [f"n_ok = rn < {channels}"]
    if cfg.align > 1:
        out.append(f"n_ok = tl.max_constancy(n_ok, [{min(cfg.align, cfg.block_n)}])")
    return indented(*out)


def stride_hints(cfg: ConvConfig) -> str:
    """align a > 1: the activation strides are multiples of a (runtime/conv_args.tensor_align), so every
    shifted row offset keeps the divisibility (a tl.multiple_of on the final offset is lost once the compiler
    re-associates the shifts of unrolled taps)."""
    if cfg.align == 1:
        return ""
    return indented(*multiple_hints([f"s{t}_{s}" for t in "xy" for s in ("n", *dims(cfg))], cfg.align))


def channel_major_pids(channels: str) -> list[str]:
    """pid_m (pixel block) and pid_n (channel tile) of a flat grid axis 0 whose channel tiles vary fastest:
    the programs of every channel tile of a pixel block run side by side and share each pixel's lines of
    channels while they are in L2; with pixel blocks fastest, the tiles of a line ran a whole layer apart.
    H200: the larger depthwise layers ran up to 17% faster this way (roll: MobileNetV2 stage1.0 / stage2.0 fwd
    44.7 -> 39.5 / 25.8 -> 22.5 us, X3D res3.0 bwd_weight 225 -> 187 us; tap: X3D res3.0 fwd 127.6 -> 112.4
    us), the small ones within noise."""
    return ["pid = tl.program_id(0)", f"n_tiles = ({channels} + BLOCK_N - 1) // BLOCK_N",
            "pid_n = pid % n_tiles", "pid_m = pid // n_tiles"]


def _tile_start(cfg: ConvConfig, channels: str) -> str:
    return (stride_hints(cfg)
            + indented(*channel_major_pids(channels), "rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
                       "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)")
            + channel_mask(cfg, channels))


def tap_loop_nest(cfg: ConvConfig, tap_lines: Callable[[str, str, str], list[str]], ok: str, row: str,
                  level: int, unroll: int = 1, pipelined: bool = True) -> tuple[str, str, str, str, int]:
    """Nested loops over the filter dims, outermost first: (source, mask, row offset, linear tap, level) of
    the innermost body. tap_lines(s, ok, row) gives the lines of dim s that define ok_<s> (pixel mask) and
    ro_<s> (row offset) from the enclosing `ok` and `row` (a line ending in ':' guards the rest of the dim's
    body); tap_<s> is the linear tap. unroll > 1 unrolls the innermost dim to that many taps (masked past the
    filter); pipelined: the innermost run-time loop takes cfg's load stages (conv_common.loop_range)."""
    out, tap = "", ""
    ds = dims(cfg)
    runtime = ds[:-1] if unroll > 1 else ds
    piped = runtime[-1] if runtime and pipelined else ""   # the innermost run-time loop is the pipelined one
    for s in ds:
        unrolled = unroll > 1 and s == ds[-1]
        if unrolled:
            loop = f"tl.static_range(0, {unroll})"
        else:
            loop = loop_range(cfg, "0", f"flt_{s}") if s == piped else f"range(0, flt_{s})"
        out += indented(f"for f_{s} in {loop}:", level=level)
        level += 1
        for line in tap_lines(s, ok, row):   # a line ending in ':' (a guard) opens a block
            out += indented(line, level=level)
            level += line.endswith(":")
        out += indented(f"tap_{s} = {tap} * flt_{s} + f_{s}" if tap else f"tap_{s} = f_{s}", level=level)
        if unrolled:   # taps past the filter's own size: no load, no weight
            out += indented(f"ok_{s} = ok_{s} & (f_{s} < flt_{s})", level=level)
        ok, row, tap = f"ok_{s}", f"ro_{s}", f"tap_{s}"
    return out, ok, row, tap, level


def _tap_loops(cfg: ConvConfig, tap_lines: Callable[[str, str, str], list[str]], tensor: str, chan: str,
               w_off: str | None, level: int, unroll: int = 1) -> str:
    """The filter taps' loops (tap_loop_nest over the tile's pixels m_ok at r_base), then acc += activation
    tile x weight vector; w_off (a format of {tap}) is the offset of the weight vector in the packed weight,
    None for a depthwise weight read straight from w (dw_weight)."""
    ds = dims(cfg)
    out, ok, row, tap, level = tap_loop_nest(cfg, tap_lines, "m_ok", "r_base", level, unroll)
    w_ok = f"n_ok & (f_{ds[-1]} < flt_{ds[-1]})" if unroll > 1 else "n_ok"
    weight = (dw_weight(cfg, w_ok) if w_off is None
              else f"tl.load(ws_ptr + ({w_off.format(tap=tap)}), mask={w_ok}, other=0.0)")
    return out + indented(f"av = tl.load({tensor}_ptr + ({vec(cfg, row)}[:, None] + {chan}[None, :]), "
                          f"mask={ok}[:, None] & n_ok[None, :], other=0.0)",
                          f"wv = {weight}", "acc += av.to(tl.float32) * wv[None, :]", level=level)


def dw_weight(cfg: ConvConfig, mask: str, taps: dict[str, str] | None = None) -> str:
    """The fp32 weight vector of a tap for channels rn of a depthwise problem (C/G = K/G = 1, so channel rn's
    filter is w[rn, 0, ...]), gathered from w itself: a tile's few weight lines stay in L1, and no repack
    launch precedes the kernel. `taps` gives the filter coordinate per dim (default: the loop variables
    f_<s>)."""
    coord = taps or {s: f"f_{s}" for s in dims(cfg)}
    offset = " + ".join(["rn.to(tl.int64) * sw_k"] + [f"{coord[s]} * sw_{s}" for s in dims(cfg)])
    return f"tl.load(w_ptr + ({offset}), mask={mask}, other=0.0).to(tl.float32)"


def _packed_row(cfg: ConvConfig, expr: str) -> str:
    """Offset of a packed-weight row (a multiple of K, so of the align)."""
    return f"tl.multiple_of({expr}, {cfg.align})" if cfg.align > 1 else f"({expr})"


def _fwd_tap(s: str, ok: str, row: str) -> list[str]:
    """Forward: input coordinate i = o*stride - pad + f*dil (c_<s> holds o*stride - pad)."""
    return [f"i_{s} = c_{s} + f_{s} * dil_{s}",
            f"ok_{s} = {ok} & (i_{s} >= 0) & (i_{s} < in_{s})",
            f"ro_{s} = {row} + (f_{s} * dil_{s}).to(tl.int64) * sx_{s}"]


def _dgrad_tap(s: str, ok: str, row: str) -> list[str]:
    """Backward data, one phase (input coordinate i = p*stride + r): the tap meets output o = (i + pad -
    f*dil) / stride = p + e/stride with e = r + pad - f*dil, only when stride divides e, which is the same for
    every pixel of the program; other taps are skipped whole."""
    return [f"e_{s} = r_{s} + pad_{s} - f_{s} * dil_{s}",
            f"if e_{s} % str_{s} == 0:",
            f"o_{s} = p_{s} + e_{s} // str_{s}",
            f"ok_{s} = {ok} & (o_{s} >= 0) & (o_{s} < out_{s})",
            f"ro_{s} = {row} + o_{s}.to(tl.int64) * sy_{s}"]


def _store(cfg: ConvConfig, tensor: str, coord: str = "p") -> str:
    """Cast the accumulator and store it at the tile's pixels ({coord}_<s>) and channels."""
    return indented(f"o_off = {vec(cfg, _row_offset(cfg, tensor, coord))}",
                  f"tl.store({tensor}_ptr + (o_off[:, None] + rn[None, :]), "
                  f"acc.to({tl_type(cfg.out_dtype)}), mask=m_ok[:, None] & n_ok[None, :])")


# -- forward and backward data ------------------------------------------------------------------------------
def _fwd_body(cfg: ConvConfig, kind: str) -> str:
    ds = dims(cfg)
    if kind in ("dw", "dwg"):
        w_off = None if kind == "dwg" else _packed_row(cfg, "{tap} * K") + " + rn"
        loops = _tap_loops(cfg, _fwd_tap, "x", "rn", w_off, 1, cfg.block_k)
    else:
        loops = (indented("xg = (rn // KG) * CG", "for cc in range(0, CG):")
                 + _tap_loops(cfg, _fwd_tap, "x", "(xg + cc)",
                              _packed_row(cfg, "({tap} * CG + cc) * K") + " + rn", 2))
    epilogue = ""
    if cfg.bias:
        epilogue += indented("acc += tl.load(bias_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)[None, :]")
    epilogue += activation_line(cfg, "acc")
    return (_tile_start(cfg, "K")
            + indented(f"m_ok = rm < {_pixels(cfg, 'out')}")
            + _decompose(cfg, "rm", "out")
            + indented(*(f"c_{s} = p_{s} * str_{s} - pad_{s}" for s in ds))
            + indented(f"r_base = {_row_offset(cfg, 'x', 'c')}",
                     "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)")
            + loops + epilogue + _store(cfg, "y"))


def _dgrad_body(cfg: ConvConfig, kind: str) -> str:
    ds = dims(cfg)
    if kind in ("dw", "dwg"):
        w_off = None if kind == "dwg" else _packed_row(cfg, "{tap} * K") + " + rn"
        loops = _tap_loops(cfg, _dgrad_tap, "y", "rn", w_off, 1, cfg.block_k)
    else:
        loops = (indented("kg = (rn // CG) * KG", "cw = rn % CG", "for kk in range(0, KG):")
                 + _tap_loops(cfg, _dgrad_tap, "y", "(kg + kk)", "({tap} * CG + cw) * K + kg + kk", 2))
    return (_tile_start(cfg, "C") + indented(*phase_lines(dims(cfg), "rm", "m_ok", "N"))
            + _decompose(cfg, "rm", "sub")
            + indented(*(f"i_{s} = p_{s} * str_{s} + r_{s}" for s in ds))
            + indented("r_base = nb.to(tl.int64) * sy_n", "acc = tl.zeros((BLOCK_M, BLOCK_N), "
                                                          "dtype=tl.float32)")
            + loops + _store(cfg, "x", "i"))


# -- backward weight ---------------------------------------------------------------------------------------
def _tap_coords(cfg: ConvConfig, tap: str, suffix: str) -> str:
    """f_<s><suffix>: the per-dim filter coordinates of linear tap `tap` (innermost dim fastest)."""
    ds = dims(cfg)
    return split_index("qt", tap, [f"flt_{s}" for s in ds], [f"f_{s}{suffix}" for s in ds], INDENT)


def _wgrad_tap_setup(cfg: ConvConfig, j: int) -> str:
    """Scalars of tap j of the chunk: validity, per-dim shift f*dil, the x offset of that shift; its tile."""
    ds = dims(cfg)
    shift = " + ".join(f"d_{s}_{j}.to(tl.int64) * sx_{s}" for s in ds)
    return (indented(f"t_{j} = t0 + {j}", f"tok_{j} = t_{j} < taps")
            + _tap_coords(cfg, f"t_{j}", f"_{j}")
            + indented(*(f"d_{s}_{j} = f_{s}_{j} * dil_{s}" for s in ds), f"xs_{j} = {shift}",
                     f"acc_{j} = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"))


def _wgrad_pixel_loop(cfg: ConvConfig, chan: str) -> str:
    """Walk the program's pixel span in BLOCK_M blocks: one dy tile, then every tap of the chunk. Pipelined
    loops (num_stages > 1) carry the pixel coordinates from trip to trip (_advance); plain loops divide each
    trip's flat index again. Measured on the H200 (MobileNetV2 / X3D depthwise layers): carried coordinates
    made the pipelined instances up to 10% faster and the unpipelined ones 10-23% slower, although both loops
    lose 15% of their instructions."""
    ds = dims(cfg)
    carried = cfg.num_stages > 1
    out = (_decompose(cfg, "m_lo + tl.arange(0, BLOCK_M)", "out") + _block_steps(cfg, "out", "BLOCK_M")
           if carried else "")
    out += indented(f"for m0 in {loop_range(cfg, 'm_lo', 'm_hi', 'BLOCK_M')}:")
    out += indented("rm = m0 + tl.arange(0, BLOCK_M)", "m_ok = rm < m_hi", level=2)
    out += "" if carried else _decompose(cfg, "rm", "out", 2)
    out += indented(f"y_off = {vec(cfg, _row_offset(cfg, 'y', 'p'))}",
                  "dv = tl.load(y_ptr + (y_off[:, None] + rn[None, :]), mask=m_ok[:, None] & n_ok[None, :], "
                  "other=0.0).to(tl.float32)",
                  *(f"c_{s} = p_{s} * str_{s} - pad_{s}" for s in ds),
                  f"x_off = {_row_offset(cfg, 'x', 'c')}", level=2)
    for j in range(tap_chunk(cfg)):
        bounds = " & ".join(f"(c_{s} + d_{s}_{j} >= 0) & (c_{s} + d_{s}_{j} < in_{s})" for s in ds)
        out += indented(f"ok = m_ok & tok_{j} & {bounds}",
                      f"xv = tl.load(x_ptr + ({vec(cfg, f'x_off + xs_{j}')}[:, None] + {chan}[None, :]), "
                      "mask=ok[:, None] & n_ok[None, :], other=0.0)",
                      f"acc_{j} += dv * xv.to(tl.float32)", level=2)
    return out + (_advance(cfg, "out", 2) if carried else "")


def _wgrad_body(cfg: ConvConfig, kind: str) -> str:
    chunk = tap_chunk(cfg)
    taps = " * ".join(f"flt_{s}" for s in dims(cfg))
    chan = "rn" if kind == "dw" else "xc"
    stores = "".join(
        indented(f"ws_off = ((pid_s.to(tl.int64) * taps + t_{j}) * CG + cc) * K",
               f"tl.store(ws_ptr + (ws_off + rn), tl.sum(acc_{j}, axis=0), mask=n_ok & tok_{j})")
        for j in range(chunk))
    return (indented("pid_t = tl.program_id(0)", "pid_n = tl.program_id(1)", "pid_s = tl.program_id(2)",
                   "cc = pid_t % CG", "t0 = (pid_t // CG) * TAP_CHUNK", f"taps = {taps}",
                   "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)")
            + channel_mask(cfg, "K")
            + indented("xc = (rn // KG) * CG + cc", "m_lo = pid_s * SPAN",
                     f"m_hi = tl.minimum(m_lo + SPAN, {_pixels(cfg, 'out')})")
            + "".join(_wgrad_tap_setup(cfg, j) for j in range(chunk))
            + _wgrad_pixel_loop(cfg, chan) + stores)


def reduce_body(cfg: ConvConfig, kind: str) -> str:
    ds = dims(cfg)
    taps = " * ".join(f"flt_{s}" for s in ds)
    w_off = " + ".join(["k.to(tl.int64) * sw_k"] + [f"f_{s}_.to(tl.int64) * sw_{s}" for s in ds] + ["c"])
    return (split_sum_lines(kind, f"{taps} * CG * K", "SPLIT")
            + indented("k = e % K", "q = e // K", "c = q % CG", "t = q // CG")
            + _tap_coords(cfg, "t", "_")
            + indented(f"tl.store(w_ptr + ({w_off}), acc.to({tl_type(cfg.out_dtype)}), mask=ok)"))


def pack_body(cfg: ConvConfig) -> str:
    """ws[(tap * C/G + c) * K + k] = w[k, c, tap]: weight vectors contiguous over output channels."""
    ds = dims(cfg)
    taps = " * ".join(f"flt_{s}" for s in ds)
    w_off = " + ".join(["k.to(tl.int64) * sw_k"] + [f"f_{s}_.to(tl.int64) * sw_{s}" for s in ds] + ["c"])
    return (indented(f"total = {taps} * CG * K", "e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
                   "ok = e < total", "k = e % K", "q = e // K", "c = q % CG", "t = q // CG")
            + _tap_coords(cfg, "t", "_")
            + indented(f"tl.store(ws_ptr + e, tl.load(w_ptr + ({w_off}), mask=ok, other=0.0).to(tl.float32), "
                     "mask=ok)"))


_BODIES = {"fwd": _fwd_body, "bwd_data": _dgrad_body, "bwd_weight": _wgrad_body}


# -- module interface ------------------------------------------------------------------------------------
def render(cfg: ConvConfig) -> str:
    specs = entries(cfg)
    bodies = [_BODIES[cfg.direction](cfg, kind) for kind in kinds(cfg.direction)]
    if cfg.direction == "bwd_weight":
        bodies += [reduce_body(cfg, kind) for kind in REDUCE_KINDS]
    else:
        bodies.insert(0, pack_body(cfg))
    return "\n\n".join(header(spec) + body for spec, body in zip(specs, bodies))


def is_depthwise(problem: ConvProblem) -> bool:
    """Whether the `dw` entries (contiguous channel addressing) compute the problem."""
    return problem.c_per_group == 1 and problem.k_per_group == 1


def split_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> tuple[int, int]:
    """bwd_weight: (SPLIT, SPAN): SPLIT programs per (tap chunk, c, channel tile), each reducing SPAN output
    pixels (a multiple of BLOCK_M). cfg.split_k when set, else enough programs to give `sms` SMs
    PROGRAMS_PER_SM each; never more splits than pixel blocks (and no empty split when chosen here)."""
    blocks = cdiv(problem.n * math.prod(problem.output), cfg.block_m)
    chunks = cdiv(math.prod(problem.filter), tap_chunk(cfg))
    base = chunks * problem.c_per_group * cdiv(problem.k, cfg.block_n)
    split = min(cfg.split_k or max(1, min(blocks, cdiv(sms * PROGRAMS_PER_SM, base))), MAX_GRID_YZ)
    span_blocks = cdiv(blocks, split)
    if not cfg.split_k:
        split = cdiv(blocks, span_blocks)
    return split, span_blocks * cfg.block_m


def gathers_weight(problem: ConvProblem) -> bool:
    """Whether a depthwise fwd / bwd_data problem runs the `dwg` entry (weights gathered from w, no repack):
    few taps on few bytes, where the repack launch costs more than the gathers (GATHER_MAX_TAPS / _BYTES)."""
    return (is_depthwise(problem) and problem.direction != "bwd_weight"
            and math.prod(problem.filter) <= GATHER_MAX_TAPS and problem.min_bytes <= GATHER_MAX_BYTES)


def _pick(grid: tuple[int, int, int], kind: str, direction: str) -> tuple[tuple[int, int, int], ...]:
    """The grids of the compute entries: the one of `kind` gets `grid`, the others launch no program."""
    return tuple(grid if k == kind else (0, 1, 1) for k in kinds(direction))


def launch_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> LaunchPlan:
    kind = "dw" if is_depthwise(problem) else "grouped"
    if cfg.direction != "bwd_weight":
        packed = math.prod(problem.filter) * problem.c_per_group * problem.k
        channels, phases = ((problem.k, 1) if cfg.direction == "fwd"
                            else (problem.c, math.prod(problem.stride)))
        kind = "dwg" if gathers_weight(problem) else kind
        grids = ((0 if kind == "dwg" else cdiv(packed, PACK_BLOCK), 1, 1),
                 *_pick((cdiv(phase_rows(problem), cfg.block_m) * cdiv(channels, cfg.block_n), 1, phases),
                        kind, cfg.direction))
        return LaunchPlan(grids, workspaces=(("ws_ptr", packed, WORKSPACE_DTYPE),))
    split, span = split_plan(cfg, problem, sms)
    cg, taps = problem.c_per_group, math.prod(problem.filter)
    per_split = taps * cg * problem.k
    grid = (cdiv(taps, tap_chunk(cfg)) * cg, cdiv(problem.k, cfg.block_n), split)
    return LaunchPlan((*_pick(grid, kind, cfg.direction), *reduce_grids(per_split, sms)),
                      scalars=(("SPAN", span), ("SPLIT", split)),
                      workspaces=(("ws_ptr", split * per_split, WORKSPACE_DTYPE),))



# -- rules (also the roll k-loop's, kernels/conv_roll.py) -------------------------------------------------
def config_errors(cfg: ConvConfig, arch: ArchSpec, errors: rules.Errors) -> None:
    per_thread = tile_errors(cfg, errors)
    if cfg.kloop not in KLOOPS:
        errors.append(("kloop", f"family 'direct' takes kloop 'tap', 'roll' or 'halo', got {cfg.kloop!r}"))
    resource_errors(cfg, arch, per_thread, errors)


def tile_errors(cfg: ConvConfig, errors: rules.Errors) -> int:
    """The rules of the tile and of block_k; returns the values per thread of one [block_m, block_n] tile."""
    choice(errors, "block_m", cfg.block_m, BLOCKS)
    choice(errors, "block_n", cfg.block_n, BLOCKS)
    per_thread = cfg.block_m * cfg.block_n // (32 * max(cfg.num_warps, 1))
    if cfg.direction == "bwd_weight" and cfg.kloop not in ("roll", "halo"):   # their own block_k rules
        if cfg.block_k not in TAP_CHUNKS:
            errors.append(("block_k", ("family 'direct' bwd_weight takes block_k = filter taps accumulated "
                                       f"per program, one of {TAP_CHUNKS}; got {cfg.block_k}")))
        elif cfg.block_k * per_thread > MAX_WGRAD_ACC_PER_THREAD:
            errors.append(("block_k", (f"{cfg.block_k} taps x a {cfg.block_m}x{cfg.block_n} tile with "
                                       f"{cfg.num_warps} warps hold {cfg.block_k * per_thread} accumulators "
                                       f"per thread (max {MAX_WGRAD_ACC_PER_THREAD})")))
    elif cfg.block_k not in UNROLL:
        errors.append(("block_k", ("family 'direct' takes block_k = taps of the innermost filter dim "
                                   f"unrolled (1: none), one of {UNROLL}; got {cfg.block_k}")))
    if cfg.groups_per_program != 1:
        errors.append(("groups_per_program", ("family 'direct' vectorizes over channels; groups_per_program "
                                              f"must be 1, got {cfg.groups_per_program}")))
    return per_thread


def resource_errors(cfg: ConvConfig, arch: ArchSpec, per_thread: int, errors: rules.Errors) -> None:
    if per_thread > rules.MAX_ACC_PER_THREAD:
        errors.append(("num_warps", (f"a {cfg.block_m}x{cfg.block_n} tile with {cfg.num_warps} warps holds "
                                     f"more than {rules.MAX_ACC_PER_THREAD} accumulators per thread")))
    shared_memory_errors(cfg, arch, resources(cfg).shared_memory, errors)


def shared_memory_errors(cfg: ConvConfig, arch: ArchSpec, smem: int, errors: rules.Errors) -> None:
    """The stages of cfg need `smem` bytes of shared memory: more than the arch has per block is an error."""
    if smem > arch.smem_per_block:
        errors.append(("num_stages", (f"{cfg.num_stages} pipelined stages of {cfg.name} need up to {smem} B "
                                      f"of shared memory; {arch.name} has {arch.smem_per_block} B per "
                                      "block")))


def shared_memory_bytes(cfg: ConvConfig) -> int:
    """Shared memory of the pipelined loads (conv_common.loop_range), an upper estimate: num_stages - 1
    buffers of the [block_m, block_n] tiles one loop trip loads: a tap loop one per unrolled filter column
    (block_k; bwd_weight: one per tap of its chunk and its dy tile), a roll walk at stride 2 two source rows
    per filter column (bwd_weight: and its dy tile)."""
    tile = cfg.block_m * cfg.block_n * DTYPES[cfg.dtype].bytes if cfg.dtype in DTYPES else 0
    loads = cfg.block_k * (2 if cfg.kloop == "roll" else 1) + (cfg.direction == "bwd_weight")
    return max(0, cfg.num_stages - 1) * loads * tile


def resources(cfg: ConvConfig) -> Resources:
    """The pipelined loads' shared memory and the accumulator tiles (bwd_weight: one per tap of its chunk)."""
    per_thread = cfg.block_m * cfg.block_n // (32 * max(cfg.num_warps, 1))
    tiles = cfg.block_k if cfg.direction == "bwd_weight" else 1
    return Resources(shared_memory_bytes(cfg), tiles * per_thread, cfg.num_warps)


def problem_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    if cfg.direction != "bwd_weight" and cfg.block_k > 1 and problem.filter[-1] > cfg.block_k:
        return (f"filter: the kernel unrolls {cfg.block_k} taps of the innermost filter dim; the problem's "
                f"filter {problem.filter} is wider")
    if problem.c_per_group > MAX_CG:
        return (f"c_per_group: family 'direct' loops over at most {MAX_CG} input channels per group "
                f"(CUDA-core FMAs); the problem has {problem.c_per_group}")
    pixels = problem.n * max(math.prod(problem.spatial), math.prod(problem.output))
    weights = problem.k * problem.c_per_group * math.prod(problem.filter)
    for field, count in (("spatial", pixels), ("k", weights)):
        if count >= MAX_INDEX:
            what = "N x pixels" if field == "spatial" else "weight elements"
            return (f"{field}: family 'direct' indexes {what} in int32 (< {MAX_INDEX}); the problem has "
                    f"{count}")
    channels = problem.c if problem.direction == "bwd_data" else problem.k
    if -(-channels // cfg.block_n) > MAX_GRID_YZ:
        return f"block_n: {channels} channels need more than {MAX_GRID_YZ} channel tiles of {cfg.block_n}"
    return rules.phases_mismatch(problem)
