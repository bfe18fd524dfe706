"""Family `tma`, directions fwd and bwd_data at stride 1: implicit GEMM whose operand tiles are tensor-copy
(TMA) boxes, so the loads need no index math and no masks (the copy engine zero-fills the padding).

Persistent programs walk (pixel box x channel tile) units; the weight box is the dot's first operand, so both
operands stay in shared memory (Triton issue 9433). split_k >= 2 splits the reduction as kernels/conv_igemm.py
does, whose reduce entries and implicit-GEMM rules it shares. Design and measurements:
docs/design/conv_tma.md.
"""
from __future__ import annotations

import math

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.kernels import conv_common as common
from tiledispatch.kernels import conv_igemm, rules
from tiledispatch.kernels.conv_igemm import is_split
from tiledispatch.kernels.gemm_common import DOT_F32, signature_text
from tiledispatch.kernels.spec import ALIGN_BYTES, EntrySpec, LaunchPlan, Param, Resources
from tiledispatch.kernels.tma_common import REG_OVERHEAD, REGS_PER_SM, SMEM_PER_SM
from tiledispatch.problems.conv import ConvProblem

FN = "conv_tma_kernel"
BOX_W = 8          # pixels of the innermost spatial dim in a 2-D / 3-D box
BOX_H_3D = 8       # pixels of the middle dim in a 3-D box


def box_unit(ndim: int) -> int:
    """Pixels of one box row (block_m must be a multiple of it): 1-D 1, 2-D a row of BOX_W, 3-D a BOX_H_3D x
    BOX_W plane."""
    return {2: BOX_W, 3: BOX_H_3D * BOX_W}.get(ndim, 1)


def pixel_box(cfg: ConvConfig) -> tuple[int, ...]:
    """The output-pixel box of one program, outermost dim first (its volume is block_m)."""
    return box_of(cfg.ndim, cfg.block_m)


def box_of(ndim: int, pixels: int) -> tuple[int, ...]:
    """A box of `pixels` (a multiple of box_unit(ndim)) pixels, outermost dim first."""
    if ndim == 1:
        return (pixels,)
    if ndim == 2:
        return (pixels // BOX_W, BOX_W)
    return (pixels // (BOX_H_3D * BOX_W), BOX_H_3D, BOX_W)


def entries(cfg: ConvConfig) -> list[EntrySpec]:
    box = pixel_box(cfg)
    params = [p if p.name not in ("x_ptr", "y_ptr", "w_ptr")
              else Param(p.name, p.ty, divisibility=ALIGN_BYTES) for p in common.standard_params(cfg)]
    params.append(Param("NUM_PROGRAMS", "i32"))
    if is_split(cfg):
        params += [Param("ws_ptr", "*fp32", divisibility=ALIGN_BYTES), Param("SPLITS", "i32")]
    params += [Param("BLOCK_M", "constexpr", cfg.block_m),
               Param("BLOCK_N", "constexpr", cfg.block_n),
               Param("BLOCK_K", "constexpr", cfg.block_k)]
    params += [Param(f"T_{s}", "constexpr", size) for s, size in zip(common.dims(cfg), box)]
    params.append(Param(DOT_F32, "constexpr", False))
    main = EntrySpec(FN, tuple(params), cfg.num_warps, cfg.num_stages)
    return [main, *conv_igemm.reduce_entries(cfg)] if is_split(cfg) else [main]


def render(cfg: ConvConfig) -> str:
    entry = entries(cfg)[0]
    tile = _program(cfg) + _loop(cfg) + _store(cfg)
    walk = ("    for tile in range(tl.program_id(0), n_tiles_total, NUM_PROGRAMS):\n"
            if not is_split(cfg) else
            "    for unit in range(tl.program_id(0), n_tiles_total * SPLITS, NUM_PROGRAMS):\n"
            "        tile = unit % n_tiles_total\n        split = unit // n_tiles_total\n")
    body = (hints(cfg) + _descriptors(cfg) + _tile_count(cfg) + walk
            + "".join("    " + line if line.strip() else line for line in tile.splitlines(keepends=True)))
    src = f"@triton.jit\ndef {FN}(\n    {signature_text(list(entry.params))},\n):\n" + body
    return "\n\n".join([src, *conv_igemm.reduce_sources(cfg)]) if is_split(cfg) else src


# -- launch ------------------------------------------------------------------------------------------------
def pixel_tiles(cfg: ConvConfig, problem: ConvProblem) -> int:
    extents = problem.output if problem.direction == "fwd" else problem.spatial
    return problem.n * math.prod(-(-e // t) for e, t in zip(extents, pixel_box(cfg)))


def tiles(cfg: ConvConfig, problem: ConvProblem) -> int:
    """Output tiles: pixel boxes * groups * column tiles (the column tile varies fastest, then the group)."""
    cols = problem.k_per_group if problem.direction == "fwd" else problem.c_per_group
    return pixel_tiles(cfg, problem) * problem.groups * -(-cols // cfg.block_n)


def programs_per_sm(cfg: ConvConfig) -> int:
    """Resident programs per SM, from the pipelined tiles' shared memory and the accumulator registers."""
    by_smem = SMEM_PER_SM // max(1, resources(cfg).shared_memory)
    by_regs = REGS_PER_SM // (cfg.num_warps * 32 * (cfg.block_m * cfg.block_n // (32 * cfg.num_warps)
                                                   + REG_OVERHEAD))
    return max(1, min(by_smem, by_regs))


def grid(cfg: ConvConfig, problem: ConvProblem, sms: int, splits: int = 1) -> tuple[int, int, int]:
    """Persistent: at most as many programs as fit on the SMs at once, each walking tiles (split instances:
    (tile, split) units) with that stride (the tensor descriptors are made once per program)."""
    return (min(tiles(cfg, problem) * splits, max(1, sms) * programs_per_sm(cfg)), 1, 1)


def split_count(cfg: ConvConfig, problem: ConvProblem, sms: int) -> int:
    """SPLITS of a split instance (1 for the others): enough units for every program slot, at most split_k."""
    if not is_split(cfg):
        return 1
    most = min(cfg.split_k,
               max(1, conv_igemm.loop_iterations(cfg, problem) // conv_igemm.MIN_ITERS_PER_SPLIT))
    return common.auto_splits(tiles(cfg, problem), most, max(1, sms) * programs_per_sm(cfg))


def launch_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> LaunchPlan:
    if not is_split(cfg):
        programs = grid(cfg, problem, sms)
        return LaunchPlan((programs,), (("NUM_PROGRAMS", programs[0]),))
    splits = split_count(cfg, problem, sms)
    programs = grid(cfg, problem, sms, splits)
    elements = conv_igemm.written_elements(problem)
    return LaunchPlan((programs, *common.reduce_grids(elements, sms, splits > 1)),
                      (("NUM_PROGRAMS", programs[0]), ("SPLITS", splits)),
                      workspaces=(("ws_ptr", elements * splits if splits > 1 else 0, "fp32"),))



# -- rules (also the weight gradient's, kernels/conv_tma_wgrad.py) ----------------------------------------
def config_errors(cfg: ConvConfig, arch: ArchSpec, errors: rules.Errors) -> None:
    tma_errors(cfg, errors)
    conv_igemm.igemm_errors(cfg, arch, errors)


def tma_errors(cfg: ConvConfig, errors: rules.Errors) -> None:
    """2-D dots of one group over tensor-copy boxes; fwd / bwd_data walk the taps (kloop 'tap', block_m pixels
    per box), bwd_weight a filter row per program (kloop 'taprow', block_k pixels per box). The implicit-GEMM
    rules follow."""
    if cfg.dtype not in ("bf16", "fp16"):
        errors.append(("dtype", f"family 'tma' runs 16-bit tensor-core dots; dtype {cfg.dtype!r} is not one"))
    wgrad = cfg.direction == "bwd_weight"
    for field, value, want in (("groups_per_program", cfg.groups_per_program, 1),
                               ("kloop", cfg.kloop, "taprow" if wgrad else "tap"), ("align", cfg.align, 8)):
        if value != want:
            errors.append((field, f"family 'tma' {cfg.direction} needs {field}={want!r}, got {value!r}"))
    if cfg.split_k == 1 and not wgrad:
        errors.append(("split_k", (f"family 'tma' {cfg.direction} takes split_k 0 (one range) or >= 2 (at "
                                   "most that many reduction ranges), not 1")))
    box, field = box_unit(cfg.ndim), "block_k" if wgrad else "block_m"   # the pixels of one box
    pixels = getattr(cfg, field)
    if pixels % box or pixels < box:
        errors.append((field, (f"family 'tma' tiles {cfg.ndim}-D pixels in boxes of {box}-pixel rows; "
                               f"{field} must be a multiple of {box}, got {pixels}")))


def resources(cfg: ConvConfig) -> Resources:
    return conv_igemm.resources(cfg)


def channel_mismatch(problem: ConvProblem) -> str | None:
    """Stride 1 and 16-byte channel runs per group (both directions)."""
    if any(s != 1 for s in problem.stride):
        return ("stride: family 'tma' shifts whole pixel boxes per tap and needs stride 1, got "
                f"{problem.stride}")
    if problem.c_per_group % 8 or problem.k_per_group % 8:
        return (f"c_per_group: family 'tma' reads 16-byte channel runs per group; the problem has "
                f"C/G={problem.c_per_group}, K/G={problem.k_per_group}")
    return None


def index_mismatch(problem: ConvProblem, count: int) -> str | None:
    """`count` (tiles or boxes) and the pixel coordinates fit the kernel's int32 indices."""
    if count > rules.INT32_LIMIT or max(problem.spatial + problem.output) + 2 * max(
            max(p) for p in problem.padding) >= rules.INT32_LIMIT:
        return (f"spatial: {problem.n} x {problem.spatial} pixels exceed the kernel's int32 grid and "
                "coordinates")
    return None


def problem_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """Grouped bwd_data reduces whole chunks of output channels per group."""
    if reason := channel_mismatch(problem):
        return reason
    if problem.direction == "bwd_data" and problem.groups > 1 and problem.k_per_group % cfg.block_k:
        return ("k_per_group: grouped bwd_data on family 'tma' reduces whole chunks of "
                f"block_k={cfg.block_k} output channels per group; the problem has K/G={problem.k_per_group}")
    return index_mismatch(problem, tiles(cfg, problem))

# -- source pieces -----------------------------------------------------------------------------------------
def hints(cfg: ConvConfig) -> str:
    """C/G, K/G and every non-unit stride are multiples of 8 (the problem match guarantees it)."""
    names = (["C", "K", "CG", "KG", "sx_n", "sy_n", "sw_k"]
             + [f"s{t}_{s}" for t in "xyw" for s in common.dims(cfg)])
    return "".join(f"    {line}\n" for line in common.multiple_hints(names, 8))


def _tile_count(cfg: ConvConfig) -> str:
    r = common.ROLES[cfg.direction]
    out = [f"    n_tiles = ({r.cols} + BLOCK_N - 1) // BLOCK_N", "    n_tiles_total = N * G * n_tiles"]
    for s in reversed(common.dims(cfg)):
        out += [f"    boxes_{s} = ({r.o_ext}_{s} + T_{s} - 1) // T_{s}", f"    n_tiles_total *= boxes_{s}"]
    return "\n".join(out) + "\n"


def _program(cfg: ConvConfig) -> str:
    """tile -> column tile, group, box origin o0_<s> per dim and image n."""
    out = ["    pid_n = tile % n_tiles", "    rest = tile // n_tiles", "    pid_g = rest % G",
           "    rest = rest // G"]
    for s in reversed(common.dims(cfg)):
        out += [f"    o0_{s} = (rest % boxes_{s}) * T_{s}", f"    rest = rest // boxes_{s}"]
    out.append("    n = rest")
    return "\n".join(out) + "\n"


def _descriptors(cfg: ConvConfig) -> str:
    r = common.ROLES[cfg.direction]
    ds = common.dims(cfg)
    a_shape = ", ".join(["N", *(f"{r.a_ext}_{s}" for s in ds), r.red_total])
    a_strides = ", ".join([f"{r.a_stride}_n", *(f"{r.a_stride}_{s}" for s in ds), "1"])
    a_box = ", ".join(["1", *(f"T_{s}" for s in ds), "BLOCK_K"])
    w_shape = ", ".join([*(f"flt_{s}" for s in ds), "K", "CG"])   # taps outermost: see `_loop`
    w_strides = ", ".join([*(f"sw_{s}" for s in ds), "sw_k", "1"])
    ones = ", ".join("1" for _ in ds)
    w_box = f"{ones}, BLOCK_N, BLOCK_K" if cfg.direction == "fwd" else f"{ones}, BLOCK_K, BLOCK_N"
    return (f"    a_desc = tl.make_tensor_descriptor({r.a_ptr}, shape=[{a_shape}], strides=[{a_strides}], "
            f"block_shape=[{a_box}])\n"
            f"    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[{w_shape}], strides=[{w_strides}], "
            f"block_shape=[{w_box}])\n")


def _loop(cfg: ConvConfig) -> str:
    r = common.ROLES[cfg.direction]
    ds, ind = common.dims(cfg), "        "
    out = [f"    n_chunks = ({r.red} + BLOCK_K - 1) // BLOCK_K",
           "    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)"]
    n_iters = " * ".join(f"flt_{s}" for s in ds) + " * n_chunks"
    if is_split(cfg):   # the split's contiguous range of the iterations
        out += [f"    n_iters = {n_iters}", "    per_split = (n_iters + SPLITS - 1) // SPLITS",
                "    it_lo = split * per_split", "    it_hi = tl.minimum(it_lo + per_split, n_iters)"]
        first, loop = "it_lo", "    for it in range(it_lo, it_hi):"
    else:
        first, loop = "0", f"    for it in range(0, {n_iters}):"
    out += _first_taps(ds, first) + ["    kc_end = n_chunks * BLOCK_K", loop]
    # fwd: o - pad + tap; bwd_data: i + pad - tap
    sign, flip = ("-", "+") if cfg.direction == "fwd" else ("+", "-")
    a_at = ", ".join(["n", *(f"o0_{s} {sign} pad_{s} {flip} f_{s} * dil_{s}" for s in ds),
                      f"pid_g * {r.red} + kc"])
    taps = ", ".join(f"f_{s}" for s in ds)
    out.append(f"{ind}act = a_desc.load([{a_at}]).reshape(BLOCK_M, BLOCK_K).T")
    if cfg.direction == "fwd":
        out.append(f"{ind}wt = w_desc.load([{taps}, pid_g * KG + pid_n * BLOCK_N, kc])"
                   ".reshape(BLOCK_N, BLOCK_K)")
    else:
        out.append(f"{ind}wt = w_desc.load([{taps}, pid_g * KG + kc, pid_n * BLOCK_N])"
                   ".reshape(BLOCK_K, BLOCK_N).T")
    out += [f"{ind}if {DOT_F32}:",
            f"{ind}    acc += tl.dot(wt.to(tl.float32), act.to(tl.float32), input_precision=\"ieee\")",
            f"{ind}else:", f"{ind}    acc = tl.dot(wt, act, acc)"]
    return "\n".join(out + [ind + line for line in _next_taps(ds)]) + "\n"


def _first_taps(ds: list[str], it: str) -> list[str]:
    """The chunk offset kc and filter indices f_<s> of iteration `it` (taps outermost, chunks innermost)."""
    if it == "0":
        return ["    kc = 0", *(f"    f_{s} = 0" for s in ds)]
    out = [f"    tap = {it} // n_chunks", f"    kc = ({it} - tap * n_chunks) * BLOCK_K"]
    for i, s in enumerate(reversed(ds)):   # innermost filter dim first
        last = i == len(ds) - 1
        out.append(f"    f_{s} = tap" if last else f"    f_{s} = tap % flt_{s}")
        if not last:
            out.append(f"    tap = tap // flt_{s}")
    return out


def _next_taps(ds: list[str]) -> list[str]:
    """Step kc and f_<s> to the next iteration as counters: kc wraps into the innermost filter index, which
    wraps into the next. A division and a modulo a filter dim per K step cost more than the loads' address
    math (SASS of the 3-D fwd loop: 179 -> 102 instructions; docs/design/conv_tma.md)."""
    out = ["kc = kc + BLOCK_K", "wrap = kc >= kc_end", "kc = tl.where(wrap, 0, kc)"]
    inner_first = list(reversed(ds))
    for i, s in enumerate(inner_first):
        out.append(f"f_{s} = f_{s} + wrap.to(tl.int32)")
        if i < len(inner_first) - 1:
            out += [f"wrap = f_{s} >= flt_{s}", f"f_{s} = tl.where(wrap, 0, f_{s})"]
    return out


def _store(cfg: ConvConfig) -> str:
    """The output tile; split instances with SPLITS > 1 store the fp32 partial into ws[split, written pixel,
    channel] (dense N x spatial pixels, every channel) instead."""
    rows, o_terms = _epilogue_lines(cfg)
    if not is_split(cfg):
        return rows + _epilogue(cfg, o_terms)
    r = common.ROLES[cfg.direction]
    pixel = "n.to(tl.int64)"
    for s in common.dims(cfg):
        pixel = f"({pixel} * {r.o_ext}_{s} + p_{s})"
    extent = conv_igemm.written_extent(cfg)
    return (rows + "    if SPLITS == 1:\n" + _epilogue(cfg, o_terms, "        ") + "    else:\n"
            + f"        ws_split = split.to(tl.int64) * ({extent}).to(tl.int64) * {r.cols_total}\n"
            f"        ws_row = {pixel} * {r.cols_total}\n"
            "        tl.store(ws_ptr + ws_split + (ws_row[None, :] + ch[:, None]), acc, "
            "mask=m_ok[None, :] & cn_ok[:, None])\n")


def _epilogue_lines(cfg: ConvConfig) -> tuple[str, list[str]]:
    """(the tile's rows, pixel coordinates p_<s>, columns and channels as source; output offset terms)."""
    r = common.ROLES[cfg.direction]
    ds = common.dims(cfg)
    out = ["    rm = tl.arange(0, BLOCK_M)", "    m_ok = rm < BLOCK_M", "    rest = rm"]
    o_terms = [f"n.to(tl.int64) * {r.o_stride}_n"]
    for s in reversed(ds):
        out += [f"    p_{s} = o0_{s} + rest % T_{s}", f"    rest = rest // T_{s}",
                f"    m_ok = m_ok & (p_{s} < {r.o_ext}_{s})"]
        o_terms.append(f"p_{s}.to(tl.int64) * {r.o_stride}_{s}")
    out += ["    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)", f"    cn_ok = cn < {r.cols}",
            f"    ch = pid_g * {r.cols} + cn"]
    return "\n".join(out) + "\n", o_terms


def _epilogue(cfg: ConvConfig, o_terms: list[str], indent: str = "    ") -> str:
    """Bias, activation and the store of the tile (after `_epilogue_lines`), at `indent`."""
    r = common.ROLES[cfg.direction]
    text = ""
    if cfg.bias:
        text += f"{indent}acc += tl.load(bias_ptr + ch, mask=cn_ok, other=0.0).to(tl.float32)[:, None]\n"
    text += common.activation_line(cfg, indent=indent)
    return (text + f"{indent}o_row = {' + '.join(o_terms)}\n"
            f"{indent}tl.store({r.o_ptr} + (o_row[None, :] + ch[:, None]), "
            f"acc.to({common.tl_type(cfg.out_dtype)}), mask=m_ok[None, :] & cn_ok[:, None])\n")
