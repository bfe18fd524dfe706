"""Family `igemm`, directions fwd and bwd_data: implicit GEMM on tensor cores (tl.dot, fp32 accumulation).

Rows are pixels (bwd_data: by stride phase, grid axis 1), columns a group's result channels, and the reduction
runs over (tap, channel) as kloop 'tap', 'flat' or the block-diagonal 'diag' walks it; groups_per_program > 1
merges groups into one batched dot, split_k >= 2 splits the reduction into an fp32 workspace that the reduce
entries sum in order. Its rules (`igemm_errors`) also govern bwd_weight and family tma. Design:
docs/design/conv_igemm.md.
"""
from __future__ import annotations

import dataclasses
import math

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.fields import choice
from tiledispatch.dtypes import DTYPES
from tiledispatch.kernels import conv_common as common
from tiledispatch.kernels import rules
from tiledispatch.kernels.conv_common import DIAG_KLOOPS, ROW_KLOOPS, ROW_TAPS
from tiledispatch.kernels.gemm_common import DOT_F32, signature_text
from tiledispatch.kernels.spec import ALIGN_BYTES, EntrySpec, LaunchPlan, Param, Resources, aligned16
from tiledispatch.problems.conv import ConvProblem

FN = "conv_igemm_kernel"
VEC = 8   # elements per 16-byte vector of a 16-bit dtype: the channel alignment of align=8 instances
UNREACHABLE = 1 << 30   # a lower bound no tap shift reaches: masks every load of the rows past the end
REDUCE_FN = "conv_igemm_reduce_kernel"
MIN_ITERS_PER_SPLIT = 2   # auto split: each split runs at least this many loop iterations
DOT_BLOCKS = (16, 32, 64, 128, 256)
GROUPS_PER_PROGRAM = (1, 2, 4, 8, 16, 32, 64)
DIAG_GROUP_CHANNELS = (1, 2, 4, 8, 16, 32, 64)   # kloop 'diag': C/G == K/G it is built for (block_k)
# kloops of one other family only
KLOOP_OWNERS = {"roll": "direct", "halo": "direct", "halofh": "direct", "im2col": "gemm"}


_ROLES = common.ROLES


def is_split(cfg: ConvConfig) -> bool:
    """Instances that may split the reduction loop (split_k >= 2: at most split_k ranges)."""
    return cfg.split_k >= 2


def entries(cfg: ConvConfig) -> list[EntrySpec]:
    aligned = cfg.align == VEC
    params = [dataclasses.replace(p, divisibility=aligned16(aligned)) if p.name in ("x_ptr", "y_ptr", "w_ptr")
              else p for p in common.standard_params(cfg)]
    params += [Param("M_TILES", "i32"), Param("N_TILES", "i32")]
    if is_split(cfg):
        params += [Param("ws_ptr", "*fp32", divisibility=ALIGN_BYTES), Param("SPLITS", "i32")]
    params += [Param("BLOCK_M", "constexpr", cfg.block_m), Param("BLOCK_N", "constexpr", cfg.block_n),
               Param("BLOCK_K", "constexpr", cfg.block_k), Param("GPP", "constexpr", cfg.groups_per_program),
               Param(DOT_F32, "constexpr", False)]
    out = [EntrySpec(FN, tuple(params), cfg.num_warps, cfg.num_stages)]
    return out + reduce_entries(cfg) if is_split(cfg) else out


def reduce_entries(cfg: ConvConfig) -> list[EntrySpec]:
    """The (wide, tall) entries that sum the split partials ws[split, written pixel, channel] and run the
    epilogue (also the split instances' of family tma, kernels/conv_tma.py)."""
    reduce = (*common.standard_params(cfg), Param("ws_ptr", "*fp32", divisibility=ALIGN_BYTES),
              Param("SPLITS", "i32"))
    return [EntrySpec(fn, reduce, common.REDUCE_WARPS, 1) for fn in common.reduce_fns(REDUCE_FN)]


def reduce_sources(cfg: ConvConfig) -> list[str]:
    """The source of reduce_entries(cfg), in their order."""
    return [_reduce_source(cfg, e, kind) for e, kind in zip(reduce_entries(cfg), common.REDUCE_KINDS)]


def render(cfg: ConvConfig) -> str:
    main = entries(cfg)[0]
    loop = {"tap": _tap_loop, "flat": _flat_loop, "diag": _diag_loop}[cfg.kloop]
    body = (_program_ids(cfg) + _hints(cfg) + _phases(cfg) + _rows(cfg) + _columns(cfg) + loop(cfg)
            + _store(cfg))
    src = f"@triton.jit\ndef {FN}(\n    {signature_text(list(main.params))},\n):\n" + body
    return "\n\n".join([src, *(reduce_sources(cfg) if is_split(cfg) else [])])


# -- launch ------------------------------------------------------------------------------------------------
def _column_tiles(cfg: ConvConfig, problem: ConvProblem) -> tuple[int, int]:
    """(column tiles per group block, group blocks); 'diag' tiles the channels of all groups at once."""
    if cfg.kloop == "diag":
        return -(-(problem.k if problem.direction == "fwd" else problem.c) // cfg.block_n), 1
    cols = problem.k_per_group if problem.direction == "fwd" else problem.c_per_group
    return -(-cols // cfg.block_n), -(-problem.groups // cfg.groups_per_program)


def grid(cfg: ConvConfig, problem: ConvProblem, splits: int = 1) -> tuple[int, int, int]:
    """(M tiles * group blocks * column tiles, phases, splits); the column tile varies fastest, then the group
    block, so programs running together read the same pixels (and neighbouring channels of them)."""
    m_tiles = -(-common.phase_rows(problem) // cfg.block_m)
    n_tiles, blocks = _column_tiles(cfg, problem)
    phases = 1 if problem.direction == "fwd" else math.prod(problem.stride)
    return (m_tiles * blocks * n_tiles, phases, splits)


def loop_iterations(cfg: ConvConfig, problem: ConvProblem) -> int:
    """Reduction-loop iterations of one program (bwd_data: of the phase with the most taps)."""
    if problem.direction == "fwd":
        taps, red = math.prod(problem.filter), problem.c_per_group
    else:
        # per dim the taps meeting one phase are every (s / gcd(s, d))-th
        taps = math.prod(-(-f // (s // math.gcd(s, d)))
                         for f, s, d in zip(problem.filter, problem.stride, problem.dilation))
        taps, red = max(taps, 1), problem.k_per_group
    if cfg.kloop == "diag":
        return taps
    if cfg.kloop == "flat":
        return -(-(taps * red) // cfg.block_k)
    return taps * -(-red // cfg.block_k)


def split_count(cfg: ConvConfig, problem: ConvProblem, sms: int) -> int:
    """SPLITS of a split instance on `problem` (1 for the others): enough to fill the SMs, at most split_k."""
    if not is_split(cfg):
        return 1
    x, y, _ = grid(cfg, problem)
    most = min(cfg.split_k, max(1, loop_iterations(cfg, problem) // MIN_ITERS_PER_SPLIT))
    return common.auto_splits(x * y, most, max(1, sms))


def written_elements(problem: ConvProblem) -> int:
    """Elements of the tensor fwd / bwd_data writes (y, dx)."""
    if problem.direction == "fwd":
        return problem.n * math.prod(problem.output) * problem.k
    return problem.n * math.prod(problem.spatial) * problem.c


def launch_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> LaunchPlan:
    scalars = [("M_TILES", -(-common.phase_rows(problem) // cfg.block_m)),
               ("N_TILES", _column_tiles(cfg, problem)[0])]
    if not is_split(cfg):
        return LaunchPlan((grid(cfg, problem),), tuple(scalars))
    splits = split_count(cfg, problem, sms)
    elements = written_elements(problem)
    return LaunchPlan((grid(cfg, problem, splits), *common.reduce_grids(elements, sms, splits > 1)),
                      tuple(scalars + [("SPLITS", splits)]),
                      workspaces=(("ws_ptr", elements * splits if splits > 1 else 0, "fp32"),))


# -- source pieces -----------------------------------------------------------------------------------------
def _dims(cfg: ConvConfig) -> tuple[str, ...]:
    return common.dims(cfg)


def _inner_first(cfg: ConvConfig) -> tuple[str, ...]:
    return tuple(reversed(_dims(cfg)))


def _program_ids(cfg: ConvConfig) -> str:
    if cfg.kloop == "diag":
        return "    pid = tl.program_id(0)\n    pid_n = pid % N_TILES\n    pid_m = pid // N_TILES\n"
    return """\
    pid = tl.program_id(0)
    pid_n = pid % N_TILES
    rest = pid // N_TILES
    n_gblocks = (G + GPP - 1) // GPP
    pid_g = rest % n_gblocks
    pid_m = rest // n_gblocks
"""


def _hints(cfg: ConvConfig) -> str:
    """align=8: channel counts and every non-unit stride are multiples of 8 (see the module docstring; weight
    strides of 'diag' instances: of gcd(8, C/G), runtime/conv_args.tensor_align)."""
    if cfg.align != VEC:
        return ""
    if cfg.kloop == "diag":   # C/G (BLOCK_K) may be below 8: weight strides are multiples of gcd(8, C/G)
        names = ["C", "K", "sx_n", "sy_n"] + [f"s{t}_{s}" for t in "xy" for s in _dims(cfg)]
        weights = ["sw_k"] + [f"sw_{s}" for s in _dims(cfg)]
        lines = common.multiple_hints(names, VEC) + common.multiple_hints(weights, math.gcd(VEC, cfg.block_k))
    else:
        names = ["CG", "KG", "sx_n", "sy_n", "sw_k"] + [f"s{t}_{s}" for t in "xyw" for s in _dims(cfg)]
        lines = common.multiple_hints(names, VEC)
    return "".join(f"    {line}\n" for line in lines)


def _phases(cfg: ConvConfig) -> str:
    """Per dim: R_s rows of the GEMM view, and the taps that meet them as t0_s + ts_s * j for j < nt_s."""
    if cfg.direction == "fwd":
        return "".join(f"    R_{s} = out_{s}\n    nt_{s} = flt_{s}\n" for s in _dims(cfg))
    out = ["    ph = tl.program_id(1)"]
    for s in _inner_first(cfg):
        out += [f"    p_{s} = ph % str_{s}", f"    ph = ph // str_{s}",
                f"    R_{s} = (in_{s} - p_{s} + str_{s} - 1) // str_{s}",
                # smallest t >= 0 with (p + pad - t*dil) % str == 0, and the period of such t
                f"    t0_{s} = str_{s} + flt_{s}", f"    ts_{s} = str_{s}",
                f"    for j in range(0, str_{s}):",
                f"        hit = (p_{s} + pad_{s} - j * dil_{s}) % str_{s} == 0",
                f"        t0_{s} = tl.where(hit & (j < t0_{s}), j, t0_{s})",
                f"        period = ((j + 1) * dil_{s}) % str_{s} == 0",
                f"        ts_{s} = tl.where(period & (j + 1 < ts_{s}), j + 1, ts_{s})",
                f"    nt_{s} = tl.maximum((flt_{s} - t0_{s} + ts_{s} - 1) // ts_{s}, 0)"]
    return "\n".join(out) + "\n"


def _rows(cfg: ConvConfig) -> str:
    """Decompose the program's rows into (n, q_s). a_row: A offset of the row at tap 0 (a pixel coordinate
    base_s per dim, possibly outside the tensor); a tap shifting it by sh_s stays inside where lo_s <= sh_s <
    hi_s (lo of the first dim is out of reach for rows past the end). o_row: written-row offset."""
    r = _ROLES[cfg.direction]
    dims = _dims(cfg)
    out = ["    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
           "    m_ok = rm < N * " + " * ".join(f"R_{s}" for s in dims), "    rr_ = rm"]
    for s in _inner_first(cfg):
        out += [f"    q_{s} = rr_ % tl.maximum(R_{s}, 1)", f"    rr_ = rr_ // tl.maximum(R_{s}, 1)"]
    a_terms = [f"rr_.to(tl.int64) * {r.a_stride}_n"]
    o_terms = [f"rr_.to(tl.int64) * {r.o_stride}_n"]
    for i, s in enumerate(dims):
        if cfg.direction == "fwd":
            out.append(f"    base_{s} = q_{s} * str_{s} - pad_{s}")
            o_terms.append(f"q_{s}.to(tl.int64) * {r.o_stride}_{s}")
        else:
            out.append(f"    base_{s} = q_{s}")
            o_terms.append(f"(p_{s} + q_{s} * str_{s}).to(tl.int64) * {r.o_stride}_{s}")
        lo = f"tl.where(m_ok, -base_{s}, {UNREACHABLE})" if i == 0 else f"-base_{s}"
        out += [f"    lo_{s} = {lo}", f"    hi_{s} = {r.a_ext}_{s} - base_{s}"]
        a_terms.append(f"base_{s}.to(tl.int64) * {r.a_stride}_{s}")
    out.append("    a_row = " + " + ".join(a_terms))
    out.append("    o_row = " + " + ".join(o_terms))
    return "\n".join(out) + "\n"


def _columns(cfg: ConvConfig) -> str:
    r = _ROLES[cfg.direction]
    if cfg.kloop == "diag":   # global channel indices; the reduction tile is the result tile
        return "\n".join(["    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
                          f"    cn_ok = cn < {r.cols_total}",
                          "    rk = tl.arange(0, BLOCK_N)", "    gj = 0", "    a_chan = pid_n * BLOCK_N",
                          "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"]) + "\n"
    out = ["    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)", f"    cn_ok = cn < {r.cols}",
           "    rk = tl.arange(0, BLOCK_K)"]
    if cfg.groups_per_program == 1:
        out += ["    gj = pid_g", "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"]
    else:   # a leading group axis: [GPP, 1, 1] broadcasts every 2-D tile to [GPP, rows, cols]
        out += ["    gj = (pid_g * GPP + tl.arange(0, GPP))[:, None, None]", "    g_ok = gj < G",
                "    acc = tl.zeros((GPP, BLOCK_M, BLOCK_N), dtype=tl.float32)"]
    out.append(f"    a_chan = gj * {r.red}")
    return "\n".join(out) + "\n"


def _tap_index(cfg: ConvConfig, var: str, indent: str) -> list[str]:
    """tap index `var` (scalar or vector) -> t_s and the A-coordinate shift sh_s of every dim."""
    out = []
    for i, s in enumerate(_inner_first(cfg)):
        last = i == cfg.ndim - 1
        out.append(f"{indent}j_{s} = {var}" if last else f"{indent}j_{s} = {var} % nt_{s}")
        if not last:
            out.append(f"{indent}{var} = {var} // nt_{s}")
    for s in _dims(cfg):
        if cfg.direction == "fwd":
            out += [f"{indent}t_{s} = j_{s}", f"{indent}sh_{s} = t_{s} * dil_{s}"]
        else:   # exact division: the phase chose taps with (p + pad - t*dil) % str == 0
            out += [f"{indent}t_{s} = t0_{s} + ts_{s} * j_{s}",
                    f"{indent}sh_{s} = (p_{s} + pad_{s} - t_{s} * dil_{s}) // str_{s}"]
    return out


def _dot(cfg: ConvConfig, indent: str) -> str:
    return (f"{indent}if {DOT_F32}:\n"
            f"{indent}    acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision=\"ieee\")\n"
            f"{indent}else:\n"
            f"{indent}    acc = tl.dot(a, b, acc, input_precision=\"ieee\")\n")


def _group_mask(cfg: ConvConfig, mask: str) -> str:
    return mask if cfg.groups_per_program == 1 else f"({mask}) & g_ok"


def _b_offsets(cfg: ConvConfig, red: str, w_tap: str) -> tuple[str, str]:
    """Weight offsets of a [BLOCK_K, BLOCK_N] tile as (group part, tile part); red, w_tap: [BK, 1]."""
    r = _ROLES[cfg.direction]
    if cfg.direction == "fwd":   # w[g*KG + col, red, tap]: contiguous along the reduction
        return f"(gj * {r.cols}).to(tl.int64) * sw_k", f"cn[None, :].to(tl.int64) * sw_k + ({w_tap} + {red})"
    return f"(gj * {r.red}).to(tl.int64) * sw_k", f"{red}.to(tl.int64) * sw_k + {w_tap} + cn[None, :]"


def _loop_range(cfg: ConvConfig, total: str, step: str = "") -> list[str]:
    """`for it` over iterations 0..total; a split instance runs only its split's range of them (as `r0`, the
    first reduction index of the iteration, when `step` is given)."""
    if not is_split(cfg):
        return [f"    for it in range(0, {total}):"]
    out = [f"    n_iters = {total}", "    per_split = (n_iters + SPLITS - 1) // SPLITS",
           "    it_lo = tl.program_id(2) * per_split", "    it_hi = tl.minimum(it_lo + per_split, n_iters)"]
    if step:
        return out + [f"    for r0 in range(it_lo * {step}, it_hi * {step}, {step}):"]
    return out + ["    for it in range(it_lo, it_hi):"]


def _tap_loop(cfg: ConvConfig) -> str:
    r = _ROLES[cfg.direction]
    dims, ind = _dims(cfg), "        "
    out = [f"    n_chunks = ({r.red} + BLOCK_K - 1) // BLOCK_K",
           "    n_taps = " + " * ".join(f"nt_{s}" for s in dims),
           *_loop_range(cfg, "n_taps * n_chunks"),
           f"{ind}tap = it // n_chunks", f"{ind}kc = (it - tap * n_chunks) * BLOCK_K"]
    out += _tap_index(cfg, "tap", ind)
    ok = " & ".join(f"(sh_{s} >= lo_{s}) & (sh_{s} < hi_{s})" for s in dims)
    out.append(f"{ind}ok = {ok}")
    out.append(f"{ind}a_off = a_row + ("
               + " + ".join(f"sh_{s}.to(tl.int64) * {r.a_stride}_{s}" for s in dims) + ")")
    out.append(f"{ind}w_tap = " + " + ".join(f"t_{s}.to(tl.int64) * sw_{s}" for s in dims))
    out += [f"{ind}red = kc + rk", f"{ind}red_ok = red < {r.red}"]
    a_mask = _group_mask(cfg, "ok[:, None] & red_ok[None, :]")
    b_mask = _group_mask(cfg, "red_ok[:, None] & cn_ok[None, :]")
    out.append(f"{ind}a = tl.load({r.a_ptr} + (a_off[:, None] + (a_chan + red[None, :])), mask={a_mask}, "
               f"other=0.0)")
    b_group, b_tile = _b_offsets(cfg, "red[:, None]", "w_tap")
    out.append(f"{ind}b = tl.load(w_ptr + ({b_group} + ({b_tile})), mask={b_mask}, other=0.0)")
    return "\n".join(out) + "\n" + _dot(cfg, ind)


def _flat_loop(cfg: ConvConfig) -> str:
    r = _ROLES[cfg.direction]
    dims, ind = _dims(cfg), "        "
    out = ["    n_red = " + " * ".join(f"nt_{s}" for s in dims) + f" * {r.red}",
           *(["    for r0 in range(0, n_red, BLOCK_K):"] if not is_split(cfg)
             else _loop_range(cfg, "(n_red + BLOCK_K - 1) // BLOCK_K", "BLOCK_K")),
           f"{ind}rr = r0 + rk", f"{ind}r_ok = rr < n_red", f"{ind}tap = rr // {r.red}",
           f"{ind}red = rr - tap * {r.red}"]
    out += _tap_index(cfg, "tap", ind)
    ok = " & ".join(f"(sh_{s}[None, :] >= lo_{s}[:, None]) & (sh_{s}[None, :] < hi_{s}[:, None])"
                    for s in dims)
    out.append(f"{ind}ok = r_ok[None, :] & {ok}")
    out.append(f"{ind}a_off = a_row[:, None] + ("
               + " + ".join(f"sh_{s}.to(tl.int64) * {r.a_stride}_{s}" for s in dims) + " + red)[None, :]")
    out.append(f"{ind}w_tap = " + " + ".join(f"t_{s}.to(tl.int64) * sw_{s}" for s in dims))
    if cfg.align == VEC:   # RED % 8 == 0 and r0 % 16 == 0: runs of 8 reduction indices share one tap
        out.append(f"{ind}a_off = tl.max_contiguous(tl.multiple_of(a_off, [1, {VEC}]), [1, {VEC}])")
    b_group, b_tile = _b_offsets(cfg, "red[:, None]", "w_tap[:, None]")
    if cfg.direction == "fwd" and cfg.align == VEC:
        out.append(f"{ind}b_off = tl.max_contiguous(tl.multiple_of({b_tile}, [{VEC}, 1]), [{VEC}, 1])")
    else:
        out.append(f"{ind}b_off = {b_tile}")
    a_mask = _group_mask(cfg, "ok")
    b_mask = _group_mask(cfg, "r_ok[:, None] & cn_ok[None, :]")
    out.append(f"{ind}a = tl.load({r.a_ptr} + (a_off + a_chan), mask={a_mask}, other=0.0)")
    out.append(f"{ind}b = tl.load(w_ptr + ({b_group} + b_off), mask={b_mask}, other=0.0)")
    return "\n".join(out) + "\n" + _dot(cfg, ind)


def _diag_loop(cfg: ConvConfig) -> str:
    """One dot per contributing tap against the block-diagonal weight of the tile's groups (CG == KG): B[r, c]
    is the weight between reduction channel a_chan + r and result channel cn[c] when both lie in one group."""
    r = _ROLES[cfg.direction]
    dims, ind = _dims(cfg), "        "
    cl = "tl.arange(0, BLOCK_N)"
    if cfg.direction == "fwd":   # w[k = cn, c = r % CG, tap]
        b_off = "cn[None, :].to(tl.int64) * sw_k + (rk % BLOCK_K)[:, None]"
    else:                        # w[k = a_chan + r, c = col % CG, tap]
        b_off = f"(a_chan + rk)[:, None].to(tl.int64) * sw_k + ({cl} % BLOCK_K)[None, :]"
    out = ["    red_ok = a_chan + rk < " + r.red_total,
           (f"    b_mask = ((rk[:, None] // BLOCK_K) == ({cl}[None, :] // BLOCK_K)) & red_ok[:, None] & "
           "cn_ok[None, :]"),
           f"    b_off = {b_off}",
           "    n_taps = " + " * ".join(f"nt_{s}" for s in dims),
           *_loop_range(cfg, "n_taps"), f"{ind}tap = it"]
    out += _tap_index(cfg, "tap", ind)
    out.append(f"{ind}ok = " + " & ".join(f"(sh_{s} >= lo_{s}) & (sh_{s} < hi_{s})" for s in dims))
    out.append(f"{ind}a_off = a_row + ("
               + " + ".join(f"sh_{s}.to(tl.int64) * {r.a_stride}_{s}" for s in dims) + ")")
    out.append(f"{ind}w_tap = " + " + ".join(f"t_{s}.to(tl.int64) * sw_{s}" for s in dims))
    out.append(f"{ind}a = tl.load({r.a_ptr} + (a_off[:, None] + (a_chan + rk)[None, :]), "
               "mask=ok[:, None] & red_ok[None, :], other=0.0)")
    out.append(f"{ind}b = tl.load(w_ptr + (b_off + w_tap), mask=b_mask, other=0.0)")
    return "\n".join(out) + "\n" + _dot(cfg, ind)


def _epilogue(cfg: ConvConfig, indent: str = "    ") -> str:
    r = _ROLES[cfg.direction]
    out = []
    if cfg.bias:
        mask = _group_mask(cfg, "cn_ok[None, :]")
        out.append(f"{indent}acc += tl.load(bias_ptr + (gj * {r.cols} + cn[None, :]), mask={mask}, "
                   f"other=0.0).to(tl.float32)")
    text = "\n".join(out) + ("\n" if out else "") + common.activation_line(cfg, indent=indent)
    mask = _group_mask(cfg, "m_ok[:, None] & cn_ok[None, :]")
    return (text + f"{indent}o_ptrs = {r.o_ptr} + (o_row[:, None] + (gj * {r.cols} + cn[None, :]))\n"
            f"{indent}tl.store(o_ptrs, acc.to({common.tl_type(cfg.out_dtype)}), mask={mask})\n")


def written_extent(cfg: ConvConfig) -> str:
    """Pixels of the written tensor (y: N x out, dx: N x in)."""
    return "N * " + " * ".join(f"{_ROLES[cfg.direction].o_ext}_{s}" for s in _dims(cfg))


def _written_pixel(cfg: ConvConfig) -> str:
    """Linear index of each row's written pixel in a dense N x spatial order (fwd: the row itself)."""
    if cfg.direction == "fwd":
        return "rm.to(tl.int64)"
    text = "rr_.to(tl.int64)"
    for s in _dims(cfg):
        text = f"({text} * in_{s} + (p_{s} + q_{s} * str_{s}))"
    return text


def _store(cfg: ConvConfig) -> str:
    """The output tile; split instances with SPLITS > 1 store the fp32 partial into ws[split] instead."""
    if not is_split(cfg):
        return _epilogue(cfg)
    r = _ROLES[cfg.direction]
    mask = _group_mask(cfg, "m_ok[:, None] & cn_ok[None, :]")
    extent = written_extent(cfg)
    return ("    if SPLITS == 1:\n" + _epilogue(cfg, "        ") + "    else:\n"
            f"        ws_split = tl.program_id(2).to(tl.int64) * ({extent}).to(tl.int64) * {r.cols_total}\n"
            f"        ws_row = {_written_pixel(cfg)} * {r.cols_total}\n"
            f"        ws_ptrs = ws_ptr + ws_split + (ws_row[:, None] + (gj * {r.cols} + cn[None, :]))\n"
            f"        tl.store(ws_ptrs, acc, mask={mask})\n")


def _reduce_source(cfg: ConvConfig, entry: EntrySpec, kind: str) -> str:
    """Sum the SPLITS fp32 partials of each written element in a fixed order; bias, activation, store."""
    r = _ROLES[cfg.direction]
    total = f"({written_extent(cfg)}).to(tl.int64) * {r.cols_total}"
    lines = [common.split_sum_lines(kind, total).rstrip("\n"),
             f"    ch = e % {r.cols_total}", f"    pix = e // {r.cols_total}"]
    offset = ["ch"]
    for s in reversed(_dims(cfg)):
        lines += [f"    i_{s} = pix % {r.o_ext}_{s}", f"    pix = pix // {r.o_ext}_{s}"]
        offset.append(f"i_{s} * {r.o_stride}_{s}")
    offset.append(f"pix * {r.o_stride}_n")
    if cfg.bias:
        lines.append("    acc += tl.load(bias_ptr + ch, mask=ok, other=0.0).to(tl.float32)")
    body = "\n".join(lines) + "\n" + common.activation_line(cfg)
    body += (f"    tl.store({r.o_ptr} + ({' + '.join(reversed(offset))}), "
             f"acc.to({common.tl_type(cfg.out_dtype)}), mask=ok)\n")
    return f"@triton.jit\ndef {entry.fn}(\n    {signature_text(list(entry.params))},\n):\n" + body


# -- rules (shared by bwd_weight, kernels/conv_wgrad.py, and family tma) -------------------------------------
def config_errors(cfg: ConvConfig, arch: ArchSpec, errors: rules.Errors) -> None:
    igemm_errors(cfg, arch, errors)


def igemm_errors(cfg: ConvConfig, arch: ArchSpec, errors: rules.Errors) -> bool:
    """The implicit-GEMM rules of every direction; whether the tile was legal enough to estimate its
    resources."""
    if cfg.kloop in KLOOP_OWNERS:
        errors.append(("kloop", (f"kloop {cfg.kloop!r} belongs to family {KLOOP_OWNERS[cfg.kloop]!r}; igemm "
                                 "walks 'tap', 'flat', 'diag', 'diagrow' or 'taprow'")))
    if cfg.kloop in ROW_KLOOPS and cfg.direction != "bwd_weight":
        errors.append(("kloop", (f"kloop {cfg.kloop!r} exists for direction 'bwd_weight' only, not "
                                 f"{cfg.direction!r}")))
    if cfg.kloop == "taprow" and cfg.groups_per_program != 1:
        errors.append(("groups_per_program", ("kloop 'taprow' takes one group per program; "
                                              f"groups_per_program must be 1, got {cfg.groups_per_program}")))
    ok = choice(errors, "block_m", cfg.block_m, DOT_BLOCKS)
    ok &= choice(errors, "block_n", cfg.block_n, DOT_BLOCKS)
    if cfg.kloop != "diag" or cfg.direction == "bwd_weight":   # fwd / bwd_data diag: block_k = C/G (below)
        ok &= choice(errors, "block_k", cfg.block_k, DOT_BLOCKS)
    ok &= choice(errors, "groups_per_program", cfg.groups_per_program, GROUPS_PER_PROGRAM)
    if not ok or cfg.num_warps not in rules.CONV_WARPS or cfg.dtype not in DTYPES:
        return False
    held = resources(cfg)
    if held.accumulators > rules.MAX_ACC_PER_THREAD:
        tiles = cfg.groups_per_program * (ROW_TAPS if cfg.kloop in ROW_KLOOPS else 1)
        errors.append(("num_warps", (f"{tiles} x {cfg.block_m}x{cfg.block_n} tile with {cfg.num_warps} warps "
                                     f"holds {held.accumulators} accumulators per thread (max "
                                     f"{rules.MAX_ACC_PER_THREAD})")))
    if held.shared_memory > arch.smem_per_block:
        errors.append(("num_stages", (f"{cfg.num_stages} stages of {cfg.name} need {held.shared_memory} B of "
                                      f"shared memory; {arch.name} has {arch.smem_per_block} B per block")))
    if cfg.kloop in DIAG_KLOOPS:
        _diag_errors(cfg, errors)
    return True


def _diag_errors(cfg: ConvConfig, errors: rules.Errors) -> None:
    """kloop 'diag': fwd / bwd_data do one block-diagonal dot per tap over the channel tile itself (block_k =
    C/G); bwd_weight 'diag' and 'diagrow' (kernels/conv_wgrad.py) tile the same channels as rows and columns
    (block_m == block_n) and reduce over pixels (block_k)."""
    if cfg.direction == "bwd_weight":
        if cfg.block_m != cfg.block_n:
            errors.append(("block_m", (f"bwd_weight kloop {cfg.kloop!r} uses one channel tile for rows and "
                                       f"columns: block_m must equal block_n={cfg.block_n}, got "
                                       f"{cfg.block_m}")))
    elif cfg.block_k not in DIAG_GROUP_CHANNELS or cfg.block_n % cfg.block_k:
        errors.append(("block_k", ("kloop 'diag' takes block_k = channels per group, one of "
                                   f"{DIAG_GROUP_CHANNELS} dividing block_n={cfg.block_n}; got "
                                   f"{cfg.block_k}")))
    if cfg.groups_per_program != 1:
        errors.append(("groups_per_program", (f"kloop {cfg.kloop!r} tiles the channels of all groups at "
                                              "once; groups_per_program must be 1, got "
                                              f"{cfg.groups_per_program}")))


def resources(cfg: ConvConfig) -> Resources:
    """The pipelined operand tiles (estimate) and the accumulator tiles: one per group of the program, times
    ROW_TAPS for the filter-row kloops (an x tile and an accumulator per unrolled tap)."""
    row_taps = ROW_TAPS if cfg.kloop in ROW_KLOOPS else 1
    # fwd / bwd_data diag reduce over the channel tile
    red = cfg.block_n if cfg.kloop == "diag" and cfg.direction != "bwd_weight" else cfg.block_k
    tile_bytes = (cfg.block_m * red + row_taps * red * cfg.block_n) * DTYPES[cfg.dtype].bytes
    tiles = cfg.groups_per_program * row_taps
    acc = tiles * cfg.block_m * cfg.block_n // (32 * cfg.num_warps)
    return Resources(max(1, cfg.num_stages) * cfg.groups_per_program * tile_bytes, acc, cfg.num_warps)


def align8_group_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """Align-8 igemm kernels (not 'diag') read 16-byte channel runs inside each group."""
    if cfg.align == 8 and (problem.c_per_group % 8 or problem.k_per_group % 8):
        return ("align: align-8 igemm kernels need channels per group that are multiples of 8 (16-byte "
                f"channel runs); the problem has C/G={problem.c_per_group}, K/G={problem.k_per_group}")
    return None


def problem_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """Row indices are int32, phases sit on grid axis 1."""
    if cfg.groups_per_program > problem.groups:
        return (f"groups_per_program: the kernel merges {cfg.groups_per_program} groups per program, the "
                f"problem has {problem.groups}")
    if cfg.kloop == "diag":
        if problem.c_per_group != cfg.block_k or problem.k_per_group != cfg.block_k:
            return (f"c_per_group: kloop 'diag' with block_k={cfg.block_k} computes C/G == K/G == "
                    f"{cfg.block_k}; the problem has C/G={problem.c_per_group}, K/G={problem.k_per_group}")
    elif reason := align8_group_mismatch(cfg, problem):
        return reason
    rows = common.phase_rows(problem)
    programs = grid(cfg, problem)[0]
    if rows + cfg.block_m > rules.INT32_LIMIT or programs > rules.INT32_LIMIT:
        return f"spatial: {rows} GEMM rows in {programs} programs exceed the kernel's int32 row indexing"
    return rules.phases_mismatch(problem)
