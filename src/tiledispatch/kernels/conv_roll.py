"""Family `direct`, kloop 'roll': depthwise convolutions that slide down the rows (H) of the image, ndim 2 and
3: fwd and bwd_weight at stride 1 or 2 along H, bwd_data at stride 1.

A program walks the source rows feeding a strip of written rows once, adding each into rolling accumulators
(one per filter row it rolls, rolled_rows), instead of loading a tile per filter tap (kernels/conv_direct.py).
fwd / bwd_data roll max(ROLL_SLOTS, block_k) filter rows (7x7 at block_k 7); bwd_weight ROLL_SLOTS. Design and
measurements: docs/design/conv_direct.md.
"""
from __future__ import annotations

import math

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.kernels import conv_direct, rules
from tiledispatch.kernels.conv_common import (
    REDUCE_KINDS,
    activation_line,
    cdiv,
    dims,
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
    dw_weight,
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

ROLL_SLOTS = 3              # filter rows rolled at least (bwd_weight: exactly); rolled_rows(cfg)
ROLL_H_STRIDES = {"fwd": (1, 2), "bwd_data": (1,), "bwd_weight": (1, 2)}   # the strides along H it walks
MAX_ROWS = 32               # written rows per program at most
ROLL_PROGRAMS_PER_SM = 3    # rows_plan's programs per SM (results/profiles/roll_chunking_h200.log)
FN = {"fwd": "conv_roll_fwd_s{}_kernel", "bwd_data": "conv_roll_dgrad_kernel",
      "bwd_weight": "conv_roll_wgrad_s{}_kernel"}   # {}: the stride along H (ROLL_H_STRIDES, an entry each)
FWD_DEPTH = "od * str_d - pad_d + fd * dil_d"   # the x depth of written depth od and filter depth fd


def rolled_rows(cfg: ConvConfig) -> int:
    """The filter rows a config rolls (the accumulators of its stride-1 walk; filter heights up to it): fwd
    and bwd_data a square window, max(ROLL_SLOTS, block_k); bwd_weight ROLL_SLOTS (its accumulator tiles are
    per filter tap: 7x7 would need 49, docs/design/conv_direct.md)."""
    return ROLL_SLOTS if cfg.direction == "bwd_weight" else max(ROLL_SLOTS, cfg.block_k)


def loads_weights_per_row(cfg: ConvConfig) -> bool:
    """Past ROLL_SLOTS filter rows the weights (rows x block_k vectors) do not stay in registers: every
    source row loads those of each filter column just before using them, from conv_direct's fp32 tap-major
    repack."""
    return rolled_rows(cfg) > ROLL_SLOTS


def entries(cfg: ConvConfig) -> list[EntrySpec]:
    """fwd, bwd_data: the weight pack (conv_direct; when packs_weight), then a rolling compute entry
    per stride along H; bwd_weight: the partial-sum entries per stride, then conv_direct's split reduce."""
    workspace = (WS_PARAM,) if packs_weight(cfg) or cfg.direction == "bwd_weight" else ()
    params = (*base_params(cfg), *workspace, Param("ROWS", "i32"), Param("BLOCK_M", "constexpr", cfg.block_m),
              Param("BLOCK_N", "constexpr", cfg.block_n))
    computes = [EntrySpec(FN[cfg.direction].format(s), params, cfg.num_warps, cfg.num_stages)
                for s in ROLL_H_STRIDES[cfg.direction]]
    if cfg.direction == "bwd_weight":
        return computes + reduce_entries(cfg)
    return ([pack_entry(cfg)] if packs_weight(cfg) else []) + computes


# -- source ----------------------------------------------------------------------------------------------
def _program(cfg: ConvConfig, side: Side) -> str:
    """Program coordinates: image nb (3-D: written depth od), row chunk (first written row j0), the strip of
    written columns dc (tiles along W fastest) and the channels rn."""
    ext = side.dst_ext
    split = ["q = pid_m", "tw = q % tiles_w", "q = q // tiles_w", "ch = q % chunks", "q = q // chunks"]
    if cfg.ndim == 3:
        split += [f"od = q % {ext}_d", f"q = q // {ext}_d"]
    return (stride_hints(cfg)
            + indented(*channel_major_pids(side.channels), "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)")
            + channel_mask(cfg, side.channels)
            + indented(f"tiles_w = ({ext}_w + BLOCK_M - 1) // BLOCK_M",
                       f"chunks = ({ext}_h + ROWS - 1) // ROWS", *split, "nb = q", "j0 = ch * ROWS",
                       "dc = tw * BLOCK_M + tl.arange(0, BLOCK_M)",
                       f"c_ok = dc < {ext}_w"))


def _columns(cfg: ConvConfig, side: Side) -> str:
    """Per unrolled filter column f: the source column of every written column, its mask and x/y offset."""
    out = []
    for f in range(cfg.block_k):
        src = (f"dc + pad_w - {f} * dil_w" if cfg.direction == "bwd_data"
               else f"dc * str_w - pad_w + {f} * dil_w")
        within = f" & ({f} < flt_w)" if f else ""
        out += [f"sc_{f} = {src}", f"ok_{f} = c_ok & (sc_{f} >= 0) & (sc_{f} < {side.src_ext}_w){within}",
                f"co_{f} = sc_{f}.to(tl.int64) * s{side.src}_w"]
    return indented(*out)


def packs_weight(cfg: ConvConfig) -> bool:
    """3-D fwd / bwd_data read the weights of a filter depth per source row: from conv_direct's tap-major fp32
    repack (one vector load each), as does every walk that loads its weights per row. Otherwise 2-D loads them
    once per program, straight from w (a gather per tap, no repack launch); bwd_weight writes them."""
    return cfg.direction != "bwd_weight" and (cfg.ndim == 3 or loads_weights_per_row(cfg))


def _weights(cfg: ConvConfig, depth: str, level: int,
             rows: tuple[int, ...] = tuple(range(ROLL_SLOTS))) -> str:
    """w_<fh>_<f>: the fp32 weight vectors of filter rows `rows` and columns 0..block_k-1 (zero past the
    filter); `depth` is the filter depth of 3-D taps (from the packed weight), '' in 2-D (from w itself)."""
    out = []
    for fh in rows:
        for f in range(cfg.block_k):
            mask = _weight_mask(fh, f)
            if depth:
                tap = f"({depth} * flt_h + {fh}) * flt_w + {f}"
                out.append(f"w_{fh}_{f} = tl.load(ws_ptr + (({tap}) * K + rn), mask={mask}, other=0.0)")
            else:
                out.append(f"w_{fh}_{f} = {dw_weight(cfg, mask, {'h': str(fh), 'w': str(f)})}")
    return indented(*out, level=level)


def _weight_mask(fh: int, f: int) -> str:
    return " & ".join(["n_ok"] + ([f"({fh} < flt_h)"] if fh else []) + ([f"({f} < flt_w)"] if f else []))


def _packed_weight(cfg: ConvConfig, depth: str, fh: int, f: int) -> str:
    """The fp32 weight vector of tap (depth, fh, f) from the tap-major repack (`depth` '' in 2-D)."""
    tap = f"({depth} * flt_h + {fh}) * flt_w + {f}" if depth else f"{fh} * flt_w + {f}"
    row = f"tl.multiple_of(({tap}) * K, {cfg.align})" if cfg.align > 1 else f"({tap}) * K"
    return f"tl.load(ws_ptr + ({row} + rn), mask={_weight_mask(fh, f)}, other=0.0)"


def _accumulate(cfg: ConvConfig, side: Side, row: str, ok: str, pairs: tuple[tuple[int, int], ...],
                level: int, depth: str = "") -> str:
    """Load the source row at offset `row` (mask `ok`) once per filter column and add it to each (slot,
    filter row) of `pairs`; with loads_weights_per_row, each with the weight vector loaded there."""
    out = []
    for f in range(cfg.block_k):
        out.append(f"sv = tl.load({side.src}_ptr + ({vec(cfg, f'{row} + co_{f}')}[:, None] + rn[None, :]), "
                   f"mask=(ok_{f} & {ok})[:, None] & n_ok[None, :], other=0.0).to(tl.float32)")
        if loads_weights_per_row(cfg):
            for slot, fh in pairs:
                out += [f"wv = {_packed_weight(cfg, depth, fh, f)}", f"acc_{slot} += sv * wv[None, :]"]
        else:
            out += [f"acc_{slot} += sv * w_{fh}_{f}[None, :]" for slot, fh in pairs]
    return indented(*out, level=level)


def _add_row(cfg: ConvConfig, side: Side, source_row: str, pairs: tuple[tuple[int, int], ...],
             level: int) -> str:
    """Source row `source_row` (r: its index, r_ok, ro: its offset), added to the (slot, filter row) `pairs`:
    in 2-D once; in 3-D once per filter depth, each with that depth's weights."""
    out = indented(f"r = {source_row}", f"r_ok = (r >= 0) & (r < {side.src_ext}_h)",
                   f"ro = src_base + r.to(tl.int64) * s{side.src}_h", level=level)
    if cfg.ndim == 2:
        return out + _accumulate(cfg, side, "ro", "r_ok", pairs, level)
    depth = "od + pad_d - fd * dil_d" if cfg.direction == "bwd_data" else FWD_DEPTH
    weights = ("" if loads_weights_per_row(cfg)
               else _weights(cfg, "fd", level + 1, tuple(sorted({fh for _, fh in pairs}))))
    return (out + indented("for fd in range(0, flt_d):", level=level)
            + indented(f"sd = {depth}", f"d_ok = r_ok & (sd >= 0) & (sd < {side.src_ext}_d)",
                       f"rd = ro + sd.to(tl.int64) * s{side.src}_d", level=level + 1)
            + weights + _accumulate(cfg, side, "rd", "d_ok", pairs, level + 1, "fd"))


def _store_oldest(cfg: ConvConfig, side: Side, row: str, when: str, ring: int) -> str:
    """Written row `row` is complete in slot 0: epilogue, store where `when` (and within the written height),
    then turn the ring of `ring` accumulators."""
    value = "acc_0 + bias_v[None, :]" if cfg.bias else "acc_0"
    turn = [f"acc_{s} = acc_{s + 1}" for s in range(ring - 1)]
    return (indented(f"j = {row}", f"st_ok = {when}(j < {side.dst_ext}_h)", f"yv = {value}", level=2)
            + activation_line(cfg, "yv", indent="        ")
            + indented(f"d_off = dst_base + j.to(tl.int64) * s{side.dst}_h + dc.to(tl.int64) * s{side.dst}_w",
                       f"tl.store({side.dst}_ptr + ({vec(cfg, 'd_off')}[:, None] + rn[None, :]), "
                       f"yv.to({tl_type(cfg.out_dtype)}), mask=(c_ok & st_ok)[:, None] & n_ok[None, :])",
                       *turn, f"acc_{ring - 1} = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)", level=2))


def _setup(cfg: ConvConfig, side: Side, start: str, ring: int) -> str:
    dst_base = f"nb.to(tl.int64) * s{side.dst}_n"
    if cfg.ndim == 3:
        dst_base += f" + od.to(tl.int64) * s{side.dst}_d"
    setup = [f"src_base = nb.to(tl.int64) * s{side.src}_n", f"dst_base = {dst_base}", f"r0 = {start}"]
    if cfg.bias:
        setup.append("bias_v = tl.load(bias_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)")
    setup += [f"acc_{slot} = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)" for slot in range(ring)]
    once = _weights(cfg, "", 1) if cfg.ndim == 2 and not loads_weights_per_row(cfg) else ""
    return _program(cfg, side) + _columns(cfg, side) + once + indented(*setup)


def _body_stride1(cfg: ConvConfig) -> str:
    """S = rolled_rows(cfg) accumulators; source row t of the walk meets written rows j0 + t - (S - 1) +
    slot."""
    side, rows = SIDES[cfg.direction], rolled_rows(cfg)
    fwd = cfg.direction == "fwd"
    pairs = tuple((slot, rows - 1 - slot if fwd else slot) for slot in range(rows))
    start = "j0 - pad_h" if fwd else f"j0 + pad_h - {rows - 1}"
    loop = loop_range(cfg, "0", f"ROWS + {rows - 1}")
    return (_setup(cfg, side, start, rows) + indented(f"for t in {loop}:")
            + _add_row(cfg, side, "r0 + t", pairs, 2)
            + _store_oldest(cfg, side, f"j0 + t - {rows - 1}", f"(t >= {rows - 1}) & ", rows))


def _stride2_pairs(rows: int, c: int) -> tuple[tuple[int, int], ...]:
    """Source row r0 + 2i + c meets written row j0 + i + slot with filter row c - 2 slot (within rows)."""
    return tuple((slot, c - 2 * slot) for slot in range((rows - 1) // 2 + 1) if 0 <= c - 2 * slot < rows)


def _body_stride2(cfg: ConvConfig) -> str:
    """(S - 1) // 2 + 1 accumulators for S = rolled_rows(cfg) filter rows: source rows r0 .. r0 + S - 3
    first, then per written row j0 + i the two rows r0 + 2i + S - 2 and + S - 1 (its last two filter rows)."""
    side, rows = SIDES[cfg.direction], rolled_rows(cfg)
    first = "".join(_add_row(cfg, side, f"r0 + {c}" if c else "r0", _stride2_pairs(rows, c), 1)
                    for c in range(rows - 2))
    return (_setup(cfg, side, "j0 * 2 - pad_h", (rows - 1) // 2 + 1) + first
            + indented(f"for i in {loop_range(cfg, '0', 'ROWS')}:")
            + _add_row(cfg, side, f"r0 + 2 * i + {rows - 2}", _stride2_pairs(rows, rows - 2), 2)
            + _add_row(cfg, side, f"r0 + 2 * i + {rows - 1}", _stride2_pairs(rows, rows - 1), 2)
            + _store_oldest(cfg, side, "j0 + i", "", (rows - 1) // 2 + 1))


_BODIES = {1: _body_stride1, 2: _body_stride2}


# -- backward weight -----------------------------------------------------------------------------------------
# dw[c, fh, fw] = sum over pixels of dy[j, col] * x[j * stride_h - pad_h + fh, col * stride_w - pad_w + fw]: a
# program sums over its ROWS x BLOCK_M dy pixels (of one image; 3-D: of one depth, for the filter depth fd =
# program_id(2)) into an accumulator tile per (filter row, filter column), acc_<fh>_<f>, and stores the column
# sums as its split (program_id(0)) of the workspace ws[SPLIT, taps, K]; conv_direct's reduce sums the splits.
def _wgrad_setup(cfg: ConvConfig, start: str) -> str:
    side = SIDES["bwd_weight"]
    x_base, dy_base = "nb.to(tl.int64) * sx_n", "nb.to(tl.int64) * sy_n"
    lines = []
    if cfg.ndim == 3:
        lines += ["fd = tl.program_id(2)", f"sd = {FWD_DEPTH}", "d_ok = (sd >= 0) & (sd < in_d)"]
        x_base += " + sd.to(tl.int64) * sx_d"
        dy_base += " + od.to(tl.int64) * sy_d"
    lines += [f"x_base = {x_base}", f"dy_base = {dy_base}", f"r0 = {start}"]
    lines += [f"acc_{fh}_{f} = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"
              for fh in range(ROLL_SLOTS) for f in range(cfg.block_k)]
    return _program(cfg, side) + _columns(cfg, side) + indented(*lines)


def _dy_row(cfg: ConvConfig, var: str, row: str, when: str, level: int) -> str:
    """`var` = the fp32 dy tile of row `row` (zero unless `when` and within the output height)."""
    return indented(f"j = {row}", f"j_ok = {when}(j < out_h)",
                    "dy_off = dy_base + j.to(tl.int64) * sy_h + dc.to(tl.int64) * sy_w",
                    f"{var} = tl.load(y_ptr + ({vec(cfg, 'dy_off')}[:, None] + rn[None, :]), "
                    "mask=(c_ok & j_ok)[:, None] & n_ok[None, :], other=0.0).to(tl.float32)", level=level)


def _x_row(cfg: ConvConfig, row: str, adds: tuple[tuple[int, str], ...], level: int, keep: str = "") -> str:
    """x row `row`, loaded once per filter column f, multiplied by each (filter row, dy tile) of `adds` into
    acc_<fh>_<f>; `keep`: also keep the tile of column f as <keep>_<f>."""
    ok = "r_ok & d_ok" if cfg.ndim == 3 else "r_ok"
    out = [f"r = {row}", "r_ok = (r >= 0) & (r < in_h)", "ro = x_base + r.to(tl.int64) * sx_h"]
    for f in range(cfg.block_k):
        out.append(f"xv = tl.load(x_ptr + ({vec(cfg, f'ro + co_{f}')}[:, None] + rn[None, :]), "
                   f"mask=(ok_{f} & {ok})[:, None] & n_ok[None, :], other=0.0).to(tl.float32)")
        out += [f"acc_{fh}_{f} += {dv} * xv" for fh, dv in adds]
        out += [f"{keep}_{f} = xv"] if keep else []
    return indented(*out, level=level)


def _wgrad_store(cfg: ConvConfig) -> str:
    """The column sums of every accumulator, into this program's split of the workspace."""
    taps = " * ".join(f"flt_{s}" for s in dims(cfg))
    out = [f"taps = {taps}", "split = pid_m.to(tl.int64)"]
    for fh in range(ROLL_SLOTS):
        for f in range(cfg.block_k):
            tap = f"(fd * flt_h + {fh}) * flt_w + {f}" if cfg.ndim == 3 else f"{fh} * flt_w + {f}"
            mask = _weight_mask(fh, f)
            out.append(f"tl.store(ws_ptr + ((split * taps + {tap}) * K + rn), tl.sum(acc_{fh}_{f}, axis=0), "
                       f"mask={mask})")
    return indented(*out)


def _wgrad_stride1(cfg: ConvConfig) -> str:
    """x row r0 + t meets dy rows j0 + t - fh (filter row fh): the last three dy tiles roll with the walk."""
    return (_wgrad_setup(cfg, "j0 - pad_h")
            # two zero tiles, not one shared: Triton carries a loop variable only if its value changes in the
            # body, and `dv_2 = dv_1` would leave dv_2 looking unchanged (codegen/lint.py)
            + indented(*(f"dv_{s} = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)" for s in (1, 2)),
                       f"for t in {loop_range(cfg, '0', f'ROWS + {ROLL_SLOTS - 1}')}:")
            + _dy_row(cfg, "dv_0", "j0 + t", "(t < ROWS) & ", 2)
            + _x_row(cfg, "r0 + t", ((0, "dv_0"), (1, "dv_1"), (2, "dv_2")), 2)
            + indented("dv_2 = dv_1", "dv_1 = dv_0", level=2) + _wgrad_store(cfg))


def _wgrad_stride2(cfg: ConvConfig) -> str:
    """dy row j0 + i meets x rows r0 + 2i + fh; the row of filter row 2 is the next dy row's filter row 0, so
    its tiles (xc_<f>) are kept for it."""
    return (_wgrad_setup(cfg, "j0 * 2 - pad_h") + _x_row(cfg, "r0", (), 1, keep="xc")
            + indented(f"for i in {loop_range(cfg, '0', 'ROWS')}:")
            + _dy_row(cfg, "dv", "j0 + i", "", 2)
            + indented(*(f"acc_0_{f} += dv * xc_{f}" for f in range(cfg.block_k)), level=2)
            + _x_row(cfg, "r0 + 2 * i + 1", ((1, "dv"),), 2)
            + _x_row(cfg, "r0 + 2 * i + 2", ((2, "dv"),), 2, keep="xc") + _wgrad_store(cfg))


_WGRAD_BODIES = {1: _wgrad_stride1, 2: _wgrad_stride2}


def render(cfg: ConvConfig) -> str:
    specs = entries(cfg)
    if cfg.direction == "bwd_weight":
        bodies = [_WGRAD_BODIES[s](cfg) for s in ROLL_H_STRIDES[cfg.direction]]
        bodies += [reduce_body(cfg, kind) for kind in REDUCE_KINDS]
    else:
        bodies = [pack_body(cfg)] if packs_weight(cfg) else []
        bodies += [_BODIES[s](cfg) for s in ROLL_H_STRIDES[cfg.direction]]
    return "\n\n".join(header(spec) + body for spec, body in zip(specs, bodies))


# -- launch ----------------------------------------------------------------------------------------------
def _written_channels(problem: ConvProblem) -> int:
    """Channels of the tensor a program's rows are walked over (dx for bwd_data, y / dy otherwise)."""
    return problem.c if problem.direction == "bwd_data" else problem.k


def rows_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> tuple[int, int]:
    """(ROWS, row strips): the written rows are cut into equal chunks of at most MAX_ROWS,
    as long as the grid keeps ROLL_PROGRAMS_PER_SM programs per SM."""
    written = problem.spatial if problem.direction == "bwd_data" else problem.output
    height, width = written[-2], written[-1]
    outer = problem.n * (written[0] if problem.ndim == 3 else 1)
    # programs per row chunk
    layer = outer * cdiv(width, cfg.block_m) * cdiv(_written_channels(problem), cfg.block_n)
    rows = max(1, min(MAX_ROWS, height, height * layer // (ROLL_PROGRAMS_PER_SM * max(1, sms))))
    chunks = cdiv(height, rows)
    return cdiv(height, chunks), outer * chunks * cdiv(width, cfg.block_m)


def grid(cfg: ConvConfig, problem: ConvProblem, sms: int) -> tuple[int, int, int]:
    """The grid of the compute entry that runs: row strips x channel tiles on axis 0, channel tiles fastest
    (conv_direct.channel_major_pids); bwd_weight's filter depths on axis 2."""
    _, strips = rows_plan(cfg, problem, sms)
    depths = problem.filter[0] if problem.direction == "bwd_weight" and problem.ndim == 3 else 1
    return strips * cdiv(_written_channels(problem), cfg.block_n), 1, depths


def launch_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> LaunchPlan:
    rows, strips = rows_plan(cfg, problem, sms)
    main = grid(cfg, problem, sms)
    computes = tuple(main if s == problem.stride[-2] else (0, 1, 1) for s in ROLL_H_STRIDES[cfg.direction])
    taps_k = math.prod(problem.filter) * problem.k
    if cfg.direction == "bwd_weight":   # every row strip is a split of the reduction
        return LaunchPlan((*computes, *reduce_grids(taps_k, sms)),
                          scalars=(("ROWS", rows), ("SPLIT", strips)),
                          workspaces=(("ws_ptr", strips * taps_k, WORKSPACE_DTYPE),))
    if not packs_weight(cfg):
        return LaunchPlan(computes, scalars=(("ROWS", rows),))
    return LaunchPlan(((cdiv(taps_k, PACK_BLOCK), 1, 1), *computes), scalars=(("ROWS", rows),),
                      workspaces=(("ws_ptr", taps_k, WORKSPACE_DTYPE),))


# -- rules ---------------------------------------------------------------------------------------------------
def config_errors(cfg: ConvConfig, arch: ArchSpec, errors: rules.Errors) -> None:
    """The direct family's rules with these: depthwise, 2-D and 3-D (it rolls down H, inside W); block_k
    filter columns unrolled in every direction (checked with the tap loop's unroll); rolled_rows(cfg)
    accumulator tiles (bwd_weight: one per filter row and column), the split given by its row strips; the
    shared memory of the weights pipelined with the rows when it loads them per row."""
    per_thread = conv_direct.tile_errors(cfg, errors)
    if cfg.ndim not in (2, 3):
        errors.append(("ndim", ("kloop 'roll' rolls down the rows of 2-D and 3-D images, not "
                                f"ndim={cfg.ndim}")))
    tiles = _tiles(cfg)
    if tiles * per_thread > conv_direct.MAX_WGRAD_ACC_PER_THREAD:
        errors.append(("num_warps", (f"kloop 'roll' keeps {tiles} {cfg.block_m}x{cfg.block_n} accumulator "
                                     f"tiles: {tiles * per_thread} values per thread with {cfg.num_warps} "
                                     f"warps (max {conv_direct.MAX_WGRAD_ACC_PER_THREAD})")))
    if cfg.direction == "bwd_weight" and cfg.split_k not in (0, 1):
        errors.append(("split_k", ("kloop 'roll' splits bwd_weight by its row strips; split_k must be 0, got "
                                   f"{cfg.split_k}")))
    conv_direct.resource_errors(cfg, arch, per_thread, errors)
    smem = resources(cfg).shared_memory
    if conv_direct.shared_memory_bytes(cfg) <= arch.smem_per_block < smem:   # (else reported above)
        weights = f"{rolled_rows(cfg)}x{cfg.block_k} weight vectors"
        errors.append(("num_stages", (f"{cfg.num_stages} pipelined stages of {cfg.name}'s rows and their "
                                      f"{weights} need up to {smem} B of shared memory; {arch.name} has "
                                      f"{arch.smem_per_block} B per block")))


def _tiles(cfg: ConvConfig) -> int:
    """Accumulator tiles: rolled_rows(cfg) (bwd_weight: one per filter row and column)."""
    return rolled_rows(cfg) * (cfg.block_k if cfg.direction == "bwd_weight" else 1)


def _weight_stage_bytes(cfg: ConvConfig) -> int:
    """Per-row weight loads pipelined with the rows (an upper estimate): num_stages - 1 buffers of the
    rolled_rows x block_k fp32 weight vectors of BLOCK_N channels one loop trip loads."""
    if not loads_weights_per_row(cfg):
        return 0
    return max(0, cfg.num_stages - 1) * rolled_rows(cfg) * cfg.block_k * cfg.block_n * 4


def resources(cfg: ConvConfig) -> Resources:
    """The pipelined source rows' shared memory (and weights, when loaded per row) and the rolled_rows(cfg)
    accumulator tiles (bwd_weight: per filter column)."""
    per_thread = cfg.block_m * cfg.block_n // (32 * max(cfg.num_warps, 1))
    smem = conv_direct.shared_memory_bytes(cfg) + _weight_stage_bytes(cfg)
    return Resources(smem, _tiles(cfg) * per_thread, cfg.num_warps)


def problem_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """Depthwise, filter rows up to rolled_rows(cfg) walked with dilation 1 and a stride of ROLL_H_STRIDES
    along H (bwd_data: stride 1 in every dim), the filter width within the unroll; then the direct family's
    rules."""
    if problem.c_per_group != 1 or problem.k_per_group != 1:
        return (f"c_per_group: kloop 'roll' computes depthwise convolutions (C/G = K/G = 1); the problem has "
                f"C/G={problem.c_per_group}, K/G={problem.k_per_group}")
    if problem.filter[-2] > rolled_rows(cfg):
        return (f"filter: kloop 'roll' rolls filters up to {rolled_rows(cfg)} rows high; the problem's is "
                f"{problem.filter}")
    if problem.filter[-1] > cfg.block_k:
        return (f"filter: the kernel unrolls {cfg.block_k} filter columns; the problem's filter "
                f"{problem.filter} is wider")
    if problem.dilation[-2] != 1:
        return f"dilation: kloop 'roll' needs dilation 1 along H, got {problem.dilation}"
    if problem.direction == "bwd_data" and any(s != 1 for s in problem.stride):
        return f"stride: kloop 'roll' computes bwd_data of stride 1 in every dim, got {problem.stride}"
    if problem.stride[-2] not in ROLL_H_STRIDES[problem.direction]:
        strides = " or ".join(map(str, ROLL_H_STRIDES[problem.direction]))
        return f"stride: kloop 'roll' rolls down H with stride {strides}, got {problem.stride}"
    return conv_direct.problem_mismatch(cfg, problem)
