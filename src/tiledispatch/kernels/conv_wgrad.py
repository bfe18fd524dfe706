"""Family `igemm`, direction bwd_weight: implicit GEMM over the pixels, split-K with a deterministic reduce.

Per group, rows are output channels, columns (tap, input channel) pairs walked by kloop ('tap', 'flat', 'diag'
and the filter-row forms 'diagrow' / 'taprow'), and the reduction runs over the N x output pixels in block_k
chunks, split over SPLITS programs whose fp32 partials the reduce entries (also family tma's) sum in split
order. Design: docs/design/conv_igemm.md.
"""
from __future__ import annotations

import dataclasses
import math

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.kernels import conv_igemm, rules
from tiledispatch.kernels.conv_common import (
    DIAG_KLOOPS,
    REDUCE_KINDS,
    REDUCE_WARPS,
    ROW_KLOOPS,
    ROW_TAPS,
    auto_splits,
    cdiv,
    dims,
    fast_divisor_params,
    fast_divisor_scalars,
    fast_divmod_lines,
    reduce_fns,
    reduce_grids,
    split_index,
    split_sum_lines,
    standard_params,
    tap_coords,
    tl_type,
)
from tiledispatch.kernels.gemm_common import DOT_F32, signature_text
from tiledispatch.kernels.spec import ALIGN_BYTES, EntrySpec, LaunchPlan, Param, Resources
from tiledispatch.problems.conv import ConvProblem

FN = "conv_wgrad_kernel"
REDUCE_FN = "conv_wgrad_reduce_kernel"
MIN_CHUNKS_PER_SPLIT = 8     # auto split: each split reduces at least this many block_k chunks
MAX_AUTO_SPLITS = 1024
MAX_GRID_YZ = rules.MAX_GRID_YZ


def row_taps(cfg: ConvConfig) -> int:
    """Accumulators (filter taps) of a program: 'diagrow' / 'taprow' ROW_TAPS of a filter row, other kloops
    one."""
    return ROW_TAPS if cfg.kloop in ROW_KLOOPS else 1


# -- parameters ------------------------------------------------------------------------------------------
def _aligned_standard_params(cfg: ConvConfig) -> list[Param]:
    """The standard parameters; align-8 instances know that the x and y base pointers are 16-byte aligned."""
    out = standard_params(cfg)
    if cfg.align == 8:
        out = [dataclasses.replace(p, divisibility=ALIGN_BYTES) if p.name in ("x_ptr", "y_ptr") else p
               for p in out]
    return out


def entries(cfg: ConvConfig) -> list[EntrySpec]:
    ws = Param("ws_ptr", "*fp32", divisibility=ALIGN_BYTES)
    main = [*_aligned_standard_params(cfg), ws, Param("SPLITS", "i32"), Param("CPS", "i32"),
            *fast_divisor_params(dims(cfg)), Param("BLOCK_M", "constexpr", cfg.block_m),
            Param("BLOCK_N", "constexpr", cfg.block_n), Param("BLOCK_K", "constexpr", cfg.block_k),
            Param("GPP", "constexpr", cfg.groups_per_program),
            Param(DOT_F32, "constexpr", False)]
    return [EntrySpec(FN, tuple(main), cfg.num_warps, cfg.num_stages), *reduce_entries(cfg)]


def reduce_entries(cfg: ConvConfig) -> list[EntrySpec]:
    """The (wide, tall) entries that sum the split partials ws[split, k, tap*CG + c] into dw (also the tma
    weight gradient's, kernels/conv_tma_wgrad.py)."""
    reduce = (*standard_params(cfg), Param("ws_ptr", "*fp32", divisibility=ALIGN_BYTES),
              Param("SPLITS", "i32"))
    return [EntrySpec(fn, reduce, REDUCE_WARPS, 1) for fn in reduce_fns(REDUCE_FN)]


# -- source pieces ---------------------------------------------------------------------------------------
def _prod(names: list[str]) -> str:
    return " * ".join(names)


def _prologue(cfg: ConvConfig) -> str:
    ds = dims(cfg)
    # align-8 problems have C/G and K/G multiples of 8 (not 'diag': whole tiles of groups are); rounding tells
    # the compiler so (same value)
    align = cfg.align == 8 and cfg.kloop not in DIAG_KLOOPS
    cgv, kgv = ("CG // 8 * 8", "KG // 8 * 8") if align else ("CG", "KG")
    src = f"""\
    pid_t = tl.program_id(0)
    pid_s = tl.program_id(1)
    pid_g = tl.program_id(2)
    CGv = {cgv}
    KGv = {kgv}
    TAPS = {_prod([f"flt_{s}" for s in ds])}
    ROW = TAPS * CGv
"""
    if cfg.kloop in DIAG_KLOOPS:
        return src + _diag_columns(cfg)
    src += """\
    tiles_m = (KGv + BLOCK_M - 1) // BLOCK_M
    tile_m = pid_t % tiles_m
    tile_n = pid_t // tiles_m
    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ok = rm < KGv
"""
    if cfg.groups_per_program == 1:
        src += "    grp = pid_g\n    ych = (grp * KGv).to(tl.int64)\n    xch = (grp * CGv).to(tl.int64)\n"
    else:
        src += ("    grp = pid_g * GPP + tl.arange(0, GPP)\n    g_ok = grp < G\n"
                "    ych = (grp * KGv).to(tl.int64)\n    xch = (grp * CGv).to(tl.int64)\n")
    return src + _columns(cfg)


def _diag_columns(cfg: ConvConfig) -> str:
    """kloop 'diag' / 'diagrow': rm = the tile's global channels (rows: k, columns: c), rc = their channel
    within the group, same_group = the (row, column) pairs of one group; then the columns of the program's tap
    ('diagrow': of each tap of its filter row) as _columns makes them."""
    # align 8: the tile width and K are multiples of 8 (problem_mismatch); rounding tells the compiler so
    tile_ch, k_total = ("BLOCK_N // CGv * CGv // 8 * 8", "K // 8 * 8") if cfg.align == 8 else (
        "BLOCK_N // CGv * CGv", "K")
    span = "TAPS"   # programs per channel tile: one per tap ('diagrow': per filter row)
    src = f"    TILE_CH = {tile_ch}\n"
    if cfg.kloop == "diagrow":
        span = "ROWS"
        src += f"    ROWS = TAPS // flt_{dims(cfg)[-1]}\n"
    src += (f"    tap = pid_t % {span}\n"
            "    lane = tl.arange(0, BLOCK_N)\n"
            f"    rm = (pid_t // {span}) * TILE_CH + lane\n"
            f"    m_ok = (lane < TILE_CH) & (rm < {k_total})\n"
            "    n_ok = m_ok\n"
            "    rc = rm % CGv\n"
            "    same_group = (lane // CGv)[:, None] == (lane // CGv)[None, :]\n")
    if cfg.kloop == "diagrow":
        return src + "    ych = 0\n    xch = 0\n" + _row_columns(cfg, x_channel="rm")
    return (src + "    ws_col = tap * CGv + rc\n" + "    ych = 0\n    xch = 0\n"
            + _tap_columns(cfg, x_channel="rm"))


def _row_columns(cfg: ConvConfig, x_channel: str) -> str:
    """'diagrow' / 'taprow': `tap` is the program's filter row (the taps of the outer dims); f_<s>, dl_<s> of
    its outer dims, then per unrolled tap j of the innermost dim: dl_<in>j, x_colj, w_colj, ws_colj
    (`x_channel` as in _tap_columns)."""
    *outer, inner = dims(cfg)
    src = split_index("t_rest", "tap", [f"flt_{s}" for s in outer], [f"f_{s}" for s in outer], "    ") \
        if outer else ""
    src += "".join(f"    dl_{s} = f_{s} * dil_{s}\n" for s in outer)
    x_row = "".join(f"dl_{s}.to(tl.int64) * sx_{s} + " for s in outer)
    w_row = "".join(f"f_{s}.to(tl.int64) * sw_{s} + " for s in outer)
    for j in range(ROW_TAPS):
        x_col = f"{x_row}dl_{inner}{j}.to(tl.int64) * sx_{inner} + {x_channel}"
        if cfg.align == 8:
            x_col = f"tl.multiple_of({x_col}, 8)"
        src += (f"    dl_{inner}{j} = {j} * dil_{inner}\n"
                f"    x_col{j} = {x_col}\n"
                f"    w_col{j} = {w_row}{j} * sw_{inner} + rc\n"
                f"    ws_col{j} = (tap * flt_{inner} + {j}) * CGv + rc\n")
    return src


def _columns(cfg: ConvConfig) -> str:
    """Per column: n_ok, x_col (input offset of the tap and channel), w_col (weight offset), ws_col (tap*CG +
    c); 'tap': dl_<s> scalars (tap offsets in input pixels); 'flat': dl_<s> vectors."""
    if cfg.kloop in ("tap", "taprow"):   # 'taprow': `tap` is the filter row (_row_columns)
        src = ("    c_tiles = (CGv + BLOCK_N - 1) // BLOCK_N\n    tap = tile_n // c_tiles\n"
               "    rc = (tile_n % c_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)\n    n_ok = rc < CGv\n")
        if cfg.kloop == "taprow":
            return src + _row_columns(cfg, x_channel="rc")
        src += "    ws_col = tap * CGv + rc\n"
    else:
        src = ("    rj = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)\n    n_ok = rj < ROW\n"
               "    tap = rj // CGv\n    rc = rj % CGv\n    ws_col = rj\n")
    return src + _tap_columns(cfg, x_channel="rc")


def _tap_columns(cfg: ConvConfig, x_channel: str) -> str:
    """f_<s>, dl_<s> of the column's tap; x_col = the input offset of tap and channel (`x_channel`: the
    channel within the group, or the global one for 'diag'), w_col = the weight offset of tap and channel in
    the group."""
    ds = dims(cfg)
    hint = cfg.align == 8
    src = tap_coords(cfg, "tap", "    ")
    for s in ds:
        dl = f"f_{s} * dil_{s}"
        if cfg.kloop == "flat" and hint:
            dl = f"tl.max_constancy({dl}, 8)"   # constant over runs of CG >= 8 columns (one tap)
        src += f"    dl_{s} = {dl}\n"
    x_col = " + ".join(f"dl_{s}.to(tl.int64) * sx_{s}" for s in ds) + f" + {x_channel}"
    w_col = " + ".join(f"f_{s}.to(tl.int64) * sw_{s}" for s in ds) + " + rc"
    if hint and cfg.kloop == "flat":   # runs of CG >= 8 channels of one tap, each starting on a multiple of 8
        x_col = f"tl.max_contiguous(tl.multiple_of({x_col}, 8), 8)"
    elif hint:   # block_n channels of one tap, starting on a multiple of 8 elements
        x_col = f"tl.multiple_of({x_col}, 8)"
    src += f"    x_col = {x_col}\n    w_col = {w_col}\n"
    return src


def _pixels(cfg: ConvConfig) -> str:
    """Inside the chunk loop: p_ok, y_pix (dy offset), x_pix (input offset of tap 0) and b_<s> (first input
    coordinate) of the chunk's pixels."""
    ds = dims(cfg)
    ind = "        "
    src = f"{ind}p = p0 + rk\n{ind}p_ok = p < p_hi\n"
    rest = "p"   # innermost dim first, each through its fast divisor (dm_<s>, ds_<s>)
    for s in reversed(ds):
        src += fast_divmod_lines(f"q_{s}", f"o_{s}", rest, f"out_{s}", s, ind)
        rest = f"q_{s}"
    src += f"{ind}n = {rest}\n"
    y_pix = "n.to(tl.int64) * sy_n + " + " + ".join(f"o_{s}.to(tl.int64) * sy_{s}" for s in ds)
    for s in ds:
        src += f"{ind}b_{s} = o_{s} * str_{s} - pad_{s}\n"
    x_pix = "n.to(tl.int64) * sx_n + " + " + ".join(f"b_{s}.to(tl.int64) * sx_{s}" for s in ds)
    if cfg.align == 8:
        y_pix, x_pix = f"tl.multiple_of({y_pix}, 8)", f"tl.multiple_of({x_pix}, 8)"
    src += f"{ind}y_pix = {y_pix}\n{ind}x_pix = {x_pix}\n"
    if cfg.kloop != "flat":   # row kloops: the outer dims here, the innermost one per unrolled tap (_loads)
        src += f"{ind}x_ok = p_ok"
        for s in ds[:-1] if cfg.kloop in ROW_KLOOPS else ds:
            src += f" & (b_{s} + dl_{s} >= 0) & (b_{s} + dl_{s} < in_{s})"
    else:
        src += f"{ind}x_ok = p_ok[:, None] & n_ok[None, :]"
        for s in ds:
            src += f" & (b_{s}[:, None] + dl_{s}[None, :] >= 0) & (b_{s}[:, None] + dl_{s}[None, :] < in_{s})"
    return src + "\n"


def _loads(cfg: ConvConfig) -> str:
    """a: dy [(GPP,) BK, BM]; b: x [(GPP,) BK, BN]; both masked, zero outside. 'diagrow' / 'taprow': dy, then
    per unrolled tap j its x tile bj and dot (_dot)."""
    ind = "        "
    x_rows = "x_ok" if cfg.kloop == "flat" else "x_ok[:, None]"
    if cfg.groups_per_program == 1:
        a_ptr = "y_ptr + (y_pix + ych)[:, None] + rm[None, :]"
        a_mask = "p_ok[:, None] & m_ok[None, :]"
        b_ptr = "x_ptr + (x_pix + xch)[:, None] + x_col[None, :]"
        b_mask = x_rows if cfg.kloop == "flat" else f"{x_rows} & n_ok[None, :]"
    else:
        a_ptr = "y_ptr + (y_pix[None, :] + ych[:, None])[:, :, None] + rm[None, None, :]"
        a_mask = "p_ok[None, :, None] & (g_ok[:, None] & m_ok[None, :])[:, None, :]"
        b_ptr = "x_ptr + (x_pix[None, :] + xch[:, None])[:, :, None] + x_col[None, None, :]"
        b_mask = f"{x_rows}[None, :, :] & (g_ok[:, None] & n_ok[None, :])[:, None, :]"
    src = f"{ind}a = tl.load({a_ptr}, mask={a_mask}, other=0.0)\n"
    if cfg.kloop not in ROW_KLOOPS:
        return src + f"{ind}b = tl.load({b_ptr}, mask={b_mask}, other=0.0)\n" + _dot(cfg)
    inner = dims(cfg)[-1]
    src += _transpose(cfg)
    for j in range(ROW_TAPS):
        src += (f"{ind}x_ok{j} = x_ok & (b_{inner} + dl_{inner}{j} >= 0) & (b_{inner} + dl_{inner}{j} < "
                f"in_{inner}) & ({j} < flt_{inner})\n{ind}b{j} = "
                f"tl.load({b_ptr.replace('x_col', f'x_col{j}')}, mask=x_ok{j}[:, None] & n_ok[None, :], "
                "other=0.0)\n"
                + dot_lines(cfg, f"acc{j}", f"b{j}"))
    return src


def _transpose(cfg: ConvConfig) -> str:
    at = "tl.trans(a)" if cfg.groups_per_program == 1 else "tl.permute(a, (0, 2, 1))"
    return f"        at = {at}\n"


def dot_lines(cfg: ConvConfig, acc: str, b: str) -> str:
    """`acc` += at @ `b` in the loop body (fp32 operands on the interpreter's DOT_F32 path); also the tma
    weight gradient's (kernels/conv_tma_wgrad.py)."""
    ind = "        "
    precision = ', input_precision="ieee"' if cfg.dtype == "fp32" else ""
    return (f"{ind}if {DOT_F32}:\n"
            f"{ind}    {acc} += tl.dot(at.to(tl.float32), {b}.to(tl.float32), input_precision=\"ieee\")\n"
            f"{ind}else:\n"
            f"{ind}    {acc} = tl.dot(at, {b}, {acc}{precision})\n")


def _dot(cfg: ConvConfig) -> str:
    return _transpose(cfg) + dot_lines(cfg, "acc", "b")


def _main_loop(cfg: ConvConfig) -> str:
    ds = dims(cfg)
    shape = "(BLOCK_M, BLOCK_N)" if cfg.groups_per_program == 1 else "(GPP, BLOCK_M, BLOCK_N)"
    return (f"    P = N * {_prod([f'out_{s}' for s in ds])}\n"
            "    p_lo = pid_s * CPS * BLOCK_K\n"
            "    p_hi = min(p_lo + CPS * BLOCK_K, P)\n"
            "    rk = tl.arange(0, BLOCK_K)\n"
            + "".join(f"    {acc} = tl.zeros({shape}, dtype=tl.float32)\n" for acc in _accumulators(cfg))
            + "    for p0 in range(p_lo, p_hi, BLOCK_K):\n"
            + _pixels(cfg) + _loads(cfg))


def _accumulators(cfg: ConvConfig) -> list[str]:
    return [f"acc{j}" for j in range(ROW_TAPS)] if cfg.kloop in ROW_KLOOPS else ["acc"]


def _store(cfg: ConvConfig) -> str:
    """SPLITS == 1: dw in out_dtype; else the fp32 partial into ws[pid_s, k, tap*CG + c]. 'diagrow' /
    'taprow': one store per unrolled tap j (its accumulator and columns), masked past the filter."""
    out_ty = tl_type(cfg.out_dtype)
    if cfg.groups_per_program == 1:
        k_row = "(ych + rm)"
        mask = "m_ok[:, None] & n_ok[None, :]" + (" & same_group" if cfg.kloop in DIAG_KLOOPS else "")
        w_off = f"{k_row}[:, None] * sw_k + w_col[None, :]"
        ws_off = f"{k_row}[:, None] * ROW + ws_col[None, :]"
    else:
        k_row = "(ych[:, None] + rm[None, :])"
        mask = "(g_ok[:, None] & m_ok[None, :])[:, :, None] & n_ok[None, None, :]"
        w_off = f"{k_row}[:, :, None] * sw_k + w_col[None, None, :]"
        ws_off = f"{k_row}[:, :, None] * ROW + ws_col[None, None, :]"
    if cfg.kloop not in ROW_KLOOPS:
        return f"    mask = {mask}\n" + store_lines("acc", "mask", w_off, ws_off, out_ty)
    src, inner = "", dims(cfg)[-1]
    for j in range(ROW_TAPS):
        src += (f"    mask{j} = {mask} & ({j} < flt_{inner})\n"
                + store_lines(f"acc{j}", f"mask{j}", w_off.replace("w_col", f"w_col{j}"),
                               ws_off.replace("ws_col", f"ws_col{j}"), out_ty))
    return src


def store_lines(acc: str, mask: str, w_off: str, ws_off: str, out_ty: str) -> str:
    """`acc` into dw at `w_off` (SPLITS == 1, in out_dtype) or into its split's fp32 workspace rows at
    `ws_off`; also the tma weight gradient's."""
    return ("    if SPLITS == 1:\n"
            f"        tl.store(w_ptr + {w_off}, {acc}.to({out_ty}), mask={mask})\n"
            "    else:\n"
            "        ws_split = pid_s.to(tl.int64) * K * ROW\n"
            f"        tl.store(ws_ptr + ws_split + {ws_off}, {acc}, mask={mask})\n")


def reduce_sources(cfg: ConvConfig) -> list[str]:
    """The source of reduce_entries(cfg), in their order."""
    return [_reduce_source(cfg, e, kind) for e, kind in zip(reduce_entries(cfg), REDUCE_KINDS)]


def _reduce_source(cfg: ConvConfig, entry: EntrySpec, kind: str) -> str:
    ds = dims(cfg)
    w_off = "k * sw_k + " + " + ".join(f"f_{s} * sw_{s}" for s in ds) + " + c"
    return (f"@triton.jit\ndef {entry.fn}(\n    {signature_text(list(entry.params))},\n):\n"
            f"    ROW = ({_prod([f'flt_{s}' for s in ds])} * CG).to(tl.int64)\n"
            + split_sum_lines(kind, "K * ROW")
            + "    k = e // ROW\n    col = e % ROW\n    tap = col // CG\n    c = col % CG\n"
            + tap_coords(cfg, "tap", "    ")
            + f"    tl.store(w_ptr + {w_off}, acc.to({tl_type(cfg.out_dtype)}), mask=ok)\n")


def render(cfg: ConvConfig) -> str:
    main = entries(cfg)[0]
    main_src = (f"@triton.jit\ndef {FN}(\n    {signature_text(list(main.params))},\n):\n"
                + _prologue(cfg) + _main_loop(cfg) + _store(cfg))
    return "\n\n".join([main_src, *reduce_sources(cfg)])


# -- launch ----------------------------------------------------------------------------------------------
def filter_spans(cfg: ConvConfig, problem: ConvProblem) -> int:
    """The filter's share of the column tiles: its taps, or for the row kloops its rows (taps of the outer
    dims; also the tma weight gradient's)."""
    taps = math.prod(problem.filter)
    return taps // problem.filter[-1] if cfg.kloop in ROW_KLOOPS else taps


def tile_counts(cfg: ConvConfig, problem: ConvProblem) -> tuple[int, int, int]:
    """(tiles_m, tiles_n, group blocks) of the main grid."""
    taps, cg = math.prod(problem.filter), problem.c_per_group
    if cfg.kloop in DIAG_KLOOPS:   # one tap ('diagrow': filter row) x block_n // C/G whole groups per program
        return 1, filter_spans(cfg, problem) * cdiv(problem.groups, max(1, cfg.block_n // cg)), 1
    if cfg.kloop in ("tap", "taprow"):   # 'taprow': a column tile per filter row instead of per tap
        tiles_n = filter_spans(cfg, problem) * cdiv(cg, cfg.block_n)
    else:
        tiles_n = cdiv(taps * cg, cfg.block_n)
    return cdiv(problem.k_per_group, cfg.block_m), tiles_n, cdiv(problem.groups, cfg.groups_per_program)


def pixel_chunks(cfg: ConvConfig, problem: ConvProblem) -> int:
    return cdiv(problem.n * math.prod(problem.output), cfg.block_k)


def split_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> tuple[int, int]:
    """(SPLITS, CPS): the number of pixel ranges and the block_k chunks per range (no range is empty)."""
    chunks = pixel_chunks(cfg, problem)
    tiles_m, tiles_n, gblocks = tile_counts(cfg, problem)
    most = max(1, min(chunks // MIN_CHUNKS_PER_SPLIT, MAX_AUTO_SPLITS))
    wanted = cfg.split_k or auto_splits(tiles_m * tiles_n * gblocks, most, max(1, sms))
    cps = cdiv(chunks, max(1, min(wanted, chunks, MAX_GRID_YZ)))
    return cdiv(chunks, cps), cps


def launch_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> LaunchPlan:
    tiles_m, tiles_n, gblocks = tile_counts(cfg, problem)
    splits, cps = split_plan(cfg, problem, sms)
    elements = problem.k * problem.c_per_group * math.prod(problem.filter)
    return LaunchPlan(((tiles_m * tiles_n, splits, gblocks), *reduce_grids(elements, sms, splits > 1)),
                      scalars=(("SPLITS", splits), ("CPS", cps),
                               *fast_divisor_scalars({s: o for s, o in zip(dims(cfg), problem.output)})),
                      workspaces=(("ws_ptr", elements * splits if splits > 1 else 0, "fp32"),))



# -- rules (also the tma weight gradient's, kernels/conv_tma_wgrad.py) ------------------------------------
def config_errors(cfg: ConvConfig, arch: ArchSpec, errors: rules.Errors) -> None:
    """The implicit-GEMM rules, then: both kloops and every groups_per_program compile (a batched 3-D dot when
    > 1); 16 warps leave 128 registers per thread, so at most 64 of them may hold accumulators."""
    if not conv_igemm.igemm_errors(cfg, arch, errors):
        return
    acc = cfg.groups_per_program * cfg.block_m * cfg.block_n // (32 * cfg.num_warps)
    if cfg.num_warps == 16 and acc > 64:
        errors.append(("num_warps", (f"{cfg.groups_per_program} x {cfg.block_m}x{cfg.block_n} tile with 16 "
                                     f"warps holds {acc} accumulators per thread in a 128-register budget "
                                     "(max 64)")))


def resources(cfg: ConvConfig) -> Resources:
    return conv_igemm.resources(cfg)


def problem_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """Channel runs as the alignment promises, then the grid."""
    if cfg.kloop in DIAG_KLOOPS:
        reason = _diag_mismatch(cfg, problem)
    else:
        reason = conv_igemm.align8_group_mismatch(cfg, problem)
    return reason or row_mismatch(cfg, problem) or _grid_mismatch(cfg, problem)


def row_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    if cfg.kloop in ROW_KLOOPS and problem.filter[-1] > ROW_TAPS:
        return (f"filter: kloop {cfg.kloop!r} unrolls {ROW_TAPS} taps of the innermost filter dim; the "
                f"problem's filter is {problem.filter}")
    return None


def _diag_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    cg = problem.c_per_group
    if cg != problem.k_per_group or cg > cfg.block_n:
        return (f"c_per_group: bwd_weight kloop {cfg.kloop!r} needs C/G == K/G <= block_n={cfg.block_n}; the "
                f"problem has C/G={cg}, K/G={problem.k_per_group}")
    if cfg.align == 8 and (cfg.block_n // cg) * cg % 8:
        return (f"align: align-8 'diag' tiles of {cfg.block_n // cg} groups of C/G={cg} channels do not "
                "start on multiples of 8 channels")
    return None


def _grid_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """Pixel indices are int32, splits and group blocks sit on grid axes 1 and 2."""
    if (pixel_chunks(cfg, problem) + 1) * cfg.block_k > rules.INT32_LIMIT:
        return (f"spatial: {problem.n} x {problem.output} output pixels exceed the kernel's int32 pixel "
                "indexing")
    tiles_m, tiles_n, group_blocks = tile_counts(cfg, problem)
    if group_blocks > MAX_GRID_YZ:
        return (f"groups: {group_blocks} blocks of {cfg.groups_per_program} groups exceed the grid limit "
                f"{MAX_GRID_YZ}; use a larger groups_per_program")
    columns = math.prod(problem.filter) * problem.c_per_group
    if tiles_m * tiles_n > rules.INT32_LIMIT or columns > rules.INT32_LIMIT:
        return (f"filter: {problem.filter} taps x {problem.c_per_group} channels exceed the kernel's int32 "
                "columns")
    return None

# -- preset candidates -----------------------------------------------------------------------------------
# (block_m, block_n, block_k, groups_per_program, num_warps, num_stages, kloop, align): untuned starting
# points for the presets; the comment says which problems each is meant for.
_CANDIDATES = (
    (128, 128, 64, 1, 8, 3, "tap", 8),     # dense, K/G >= 128, C/G >= 128 (wgmma)
    (128, 256, 64, 1, 8, 3, "tap", 8),     # dense, wide C/G (fewer re-reads of dy)
    (64, 128, 64, 1, 4, 4, "tap", 8),      # dense, K/G = 64
    (64, 64, 64, 1, 4, 3, "flat", 8),      # dense, small C/G (taps packed into the columns)
    (64, 64, 32, 1, 4, 2, "tap", 1),       # any problem (align 1: odd channel counts)
    (64, 64, 64, 1, 4, 3, "flat", 1),      # dense stems with 3 input channels: (tap, channel) columns packed
    (32, 32, 64, 1, 4, 3, "flat", 1),      # ... with few output channels (K <= 32)
    (32, 128, 64, 1, 4, 3, "flat", 8),     # grouped, C/G = K/G = 32
    (32, 64, 64, 4, 8, 3, "flat", 8),      # grouped, C/G = K/G = 32 (3-D: G = 4)
    (16, 64, 64, 4, 4, 3, "flat", 8),      # grouped, C/G = K/G = 16
    (16, 32, 64, 8, 4, 3, "flat", 8),      # grouped, C/G = K/G = 8 (ResNeXt 32x8d-like)
    (16, 32, 32, 16, 8, 3, "flat", 1),     # grouped, C/G = K/G = 4 (ResNeXt 32x4d first stage)
    (64, 64, 64, 1, 4, 3, "diag", 8),      # many small equal groups: 64-channel tiles of whole groups (wgmma)
    (32, 32, 64, 1, 4, 3, "diag", 8),      # ... 32-channel tiles (less masked work for C/G = 4, 8)
    (16, 16, 128, 1, 4, 3, "diag", 8),     # ... 16-channel tiles (C/G = 2, 4, 8, 16; longest pixel chunks)
    (32, 32, 64, 1, 4, 2, "diag", 1),      # ... any C/G <= 32 that tiles do not align to 8 channels
    (64, 64, 64, 1, 8, 3, "diag", 8),      # ... 64-channel tiles on 8 warps (more loads in flight)
    (64, 64, 32, 1, 4, 4, "diag", 8),      # ... shorter pixel chunks, one more stage
    (64, 64, 64, 1, 8, 3, "diagrow", 8),   # a filter row per program: one dy tile serves 3 taps
    (64, 64, 32, 1, 4, 4, "diagrow", 8),
    (32, 32, 64, 1, 4, 3, "diagrow", 8),   # ... less masked work for C/G = 4, 8
    (32, 32, 64, 1, 4, 2, "diagrow", 1),   # ... C/G <= 32 whose tiles do not align to 8 channels
    (64, 64, 64, 1, 4, 3, "taprow", 8),    # dense, K/G = C/G = 64: a filter row per program (3 taps)
    (128, 64, 64, 1, 8, 3, "taprow", 8),   # ... K/G >= 128
    (64, 128, 64, 1, 8, 3, "taprow", 8),   # ... C/G >= 128
    (32, 32, 64, 1, 4, 3, "taprow", 8),    # grouped, C/G = K/G = 32
)


def candidate_configs(dtype: str, ndim: int) -> list[ConvConfig]:
    """Starting points for the bwd_weight igemm presets of one dtype and ndim (split_k chosen per problem)."""
    return [ConvConfig(family="igemm", direction="bwd_weight", ndim=ndim, dtype=dtype, block_m=bm, block_n=bn,
                       block_k=bk, groups_per_program=gpp, num_warps=w, num_stages=s, kloop=kloop,
                       align=align)
            for bm, bn, bk, gpp, w, s, kloop, align in _CANDIDATES]
