"""Parameters shared by every convolution kernel family, and small source helpers.

Names (the run-time values come from runtime/conv_args.conv_values, by these names):
- pointers by forward role, whatever the direction: `x_ptr` (input; the output dx of bwd_data), `w_ptr`
  (weight [K, C/G, *filter]; the output dw of bwd_weight), `y_ptr` (output; the input dy of the backward
  directions), `bias_ptr` (fwd with bias), `ws_ptr` (an fp32 workspace of a family that needs one);
- sizes (i32): N, C, K (totals), G, CG = C/G, KG = K/G, and per spatial dim s (`DIMS[ndim]`, outermost
  first): in_s, out_s, flt_s (filter), str_s (stride), pad_s (left padding), dil_s (dilation);
- strides in elements (i64): sx_n, sx_s (input), sy_n, sy_s (output), sw_k, sw_s (weight). The channel
  stride of every tensor is 1 (channels-last) and is not passed.
"""
from __future__ import annotations

import dataclasses
import math

from tiledispatch.configs.conv import ConvConfig
from tiledispatch.dtypes import DTYPES
from tiledispatch.kernels.gemm_common import ACTIVATION_EXPR, TL_TYPES
from tiledispatch.kernels.spec import Param
from tiledispatch.problems.conv import ConvProblem

DIMS = {1: ("w",), 2: ("h", "w"), 3: ("d", "h", "w")}
SIZE_NAMES = ("N", "C", "K", "G", "CG", "KG")
DIM_FIELDS = ("in", "out", "flt", "str", "pad", "dil")
# which forward-role tensor each direction writes
OUTPUT_ROLE = {"fwd": "y", "bwd_data": "x", "bwd_weight": "w"}
# igemm / tma bwd_weight: a filter row of taps per program, an accumulator each
ROW_KLOOPS = ("diagrow", "taprow")
ROW_TAPS = 3                         # their taps of a filter row unrolled (filter widths <= 3)
DIAG_KLOOPS = ("diag", "diagrow")    # igemm block-diagonal channel tiles (bwd_weight: rows and columns alike)
CONV_SLOTS = {"x_ptr": 0, "w_ptr": 1, "y_ptr": 2, "bias_ptr": 3}   # per-call tensors of a bound conv launch


@dataclasses.dataclass(frozen=True)
class Roles:
    """Names the rendered source of an implicit GEMM (fwd or bwd_data) uses for one direction."""

    a_ptr: str      # the A operand (fwd x, bwd_data dy)
    a_stride: str   # its stride prefix
    a_ext: str      # extent prefix of its spatial dims
    o_ptr: str      # the written tensor
    o_stride: str
    o_ext: str      # extent prefix of the written tensor's spatial dims
    red: str        # reduction channels per group
    cols: str       # result channels per group
    red_total: str  # reduction channels of all groups
    cols_total: str


ROLES = {"fwd": Roles("x_ptr", "sx", "in", "y_ptr", "sy", "out", "CG", "KG", "C", "K"),
         "bwd_data": Roles("y_ptr", "sy", "out", "x_ptr", "sx", "in", "KG", "CG", "K", "C")}


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) of positive ints (tile and program counts)."""
    return -(-a // b)


def dims(cfg: ConvConfig) -> tuple[str, ...]:
    return DIMS[cfg.ndim]


def loop_range(cfg: ConvConfig, start: str, stop: str, step: str = "") -> str:
    """The range of a CUDA-core kernel's main loop (family direct, tap and roll k-loops): num_stages > 1 asks
    Triton to software-pipeline its loads over that many stages (it pipelines the loads of a loop without
    tl.dot only when the loop carries num_stages: asynchronous copies into shared memory, issued stages - 1
    trips ahead); 1 keeps a plain loop, whose loads wait for the compute of the trip before. Compiled for
    sm_90, loads under an `if` (bwd_data's tap guard) and loops that hold another loop (3-D roll walks) stay
    unpipelined: those instances run as at 1 stage."""
    bounds = ", ".join(b for b in (start, stop, step) if b)
    return f"tl.range({bounds}, num_stages={cfg.num_stages})" if cfg.num_stages > 1 else f"range({bounds})"


def pointer_params(cfg: ConvConfig) -> list[Param]:
    """x, w, y (the written one in out_dtype, the others in dtype) and the bias of a fwd epilogue."""
    written = OUTPUT_ROLE[cfg.direction]
    out = [Param(f"{role}_ptr", "*" + DTYPES[cfg.out_dtype if role == written else cfg.dtype].triton)
           for role in ("x", "w", "y")]
    if cfg.bias:
        out.append(Param("bias_ptr", "*" + DTYPES[cfg.out_dtype].triton))
    return out


def size_params(cfg: ConvConfig) -> list[Param]:
    out = [Param(name, "i32") for name in SIZE_NAMES]
    out += [Param(f"{field}_{s}", "i32") for field in DIM_FIELDS for s in dims(cfg)]
    return out


def stride_params(cfg: ConvConfig) -> list[Param]:
    out = []
    for tensor, lead in (("x", "n"), ("y", "n"), ("w", "k")):
        out += [Param(f"s{tensor}_{lead}", "i64")] + [Param(f"s{tensor}_{s}", "i64") for s in dims(cfg)]
    return out


def standard_params(cfg: ConvConfig) -> list[Param]:
    """Pointers, sizes and strides, in this order: what every conv entry takes first."""
    return pointer_params(cfg) + size_params(cfg) + stride_params(cfg)


def phase_rows(problem: ConvProblem) -> int:
    """Written pixels one grid layer covers: N x output pixels (fwd), N x pixels of the largest stride phase
    (bwd_data, whose grid has a layer per phase: the residue-0 phase has ceil(in / stride) pixels per dim)."""
    if problem.direction == "fwd":
        return problem.n * math.prod(problem.output)
    return problem.n * math.prod(-(-size // s) for size, s in zip(problem.spatial, problem.stride))


def phase_lines(ds: tuple[str, ...], index: str, ok: str, batch: str) -> list[str]:
    """Backward data by phases: program_id(2) picks the residues r_<s> of the input coordinates modulo the
    stride (innermost dim fastest); the program's pixels are that phase's sub-grid, sub_<s> = ceil((in - r) /
    stride) per dim; `ok` = `index` < `batch` x the sub-grid's pixels, then sub_<s> at least 1 for the
    decomposition (an empty phase masks every pixel)."""
    lines = ["q = tl.program_id(2)"]
    for s in reversed(ds[1:]):
        lines += [f"r_{s} = q % str_{s}", f"q = q // str_{s}"]
    lines.append(f"r_{ds[0]} = q")
    lines += [f"sub_{s} = (in_{s} - r_{s} + str_{s} - 1) // str_{s}" for s in ds]
    lines.append(f"{ok} = {index} < " + " * ".join([batch] + [f"sub_{s}" for s in ds]))
    return lines + [f"sub_{s} = tl.maximum(sub_{s}, 1)" for s in ds]


def multiple_hints(names: list[str], unit: int) -> list[str]:
    """Statements `v = (v // unit) * unit` for scalar arguments known (from the problem's alignment) to be
    multiples of `unit`: exact under that guarantee, and the divisibility then survives every expression built
    from them (tl.multiple_of on a scalar argument is lost)."""
    return [f"{n} = ({n} // {unit}) * {unit}" for n in names]


def tl_type(dtype: str) -> str:
    return TL_TYPES[dtype]


def activation_line(cfg: ConvConfig, var: str = "acc", indent: str = "    ") -> str:
    """`var = activation(var)` for the fused forward epilogue ('' without activation)."""
    if cfg.activation == "none":
        return ""
    return f"{indent}{var} = " + ACTIVATION_EXPR[cfg.activation].format(x=var) + "\n"


def split_index(var: str, index: str, sizes: list[str], names: list[str], indent: str) -> str:
    """Source lines `names[-1] = index % sizes[-1]`, ... innermost first (`var` holding the running quotient);
    the outermost name takes the rest (no modulo)."""
    lines, rest = [], index
    for i in range(len(names) - 1, 0, -1):
        lines.append(f"{indent}{names[i]} = {rest} % {sizes[i]}")
        lines.append(f"{indent}{var} = {rest} // {sizes[i]}")
        rest = var
    lines.append(f"{indent}{names[0]} = {rest}")
    return "\n".join(lines) + "\n"


def tap_coords(cfg: ConvConfig, tap: str, indent: str) -> str:
    """f_<s> = filter coordinates of `tap` (outermost dim first in the tap index)."""
    ds = dims(cfg)
    return split_index("t_rest", tap, [f"flt_{s}" for s in ds], [f"f_{s}" for s in ds], indent)


def fast_divisor(d: int) -> tuple[int, int]:
    """(multiplier, shift) with n // d == umulhi(n, multiplier) >> shift for every 0 <= n < 2**31: the
    multiplier is 2**(31 + l) / d rounded up, l = ceil(log2 d), so the rounding error stays below 1/d. A
    divisor of 1 gives (0, 0), which `fast_divmod_lines` reads as 'the quotient is n'."""
    if not 1 <= d < 2**31:
        raise ValueError(f"fast_divisor needs 1 <= d < 2**31, got {d}")
    if d == 1:
        return 0, 0
    bits = (d - 1).bit_length()
    return (2 ** (31 + bits) + d - 1) // d, bits - 1


def fast_divmod_lines(quotient: str, remainder: str, index: str, divisor: str, magic: str,
                      indent: str) -> str:
    """Source lines `quotient = index // divisor; remainder = index % divisor` for a non-negative int32
    `index` through the multiplier `dm_{magic}` and shift `ds_{magic}` of `fast_divisor(divisor)`: a
    multiply-high and a shift where a division by a run-time value costs tens of instructions per element."""
    by = f"(tl.umulhi({index}.to(tl.uint32), dm_{magic}.to(tl.uint32)) >> ds_{magic}).to(tl.int32)"
    return (f"{indent}{quotient} = tl.where(dm_{magic} == 0, {index}, {by})\n"
            f"{indent}{remainder} = {index} - {quotient} * {divisor}\n")


def fast_split_index(index: str, sizes: list[str], magics: list[str], names: list[str], indent: str) -> str:
    """split_index through fast divisors: names[-1] = index % sizes[-1] ... innermost first, each division by
    sizes[i] through the multiplier and shift named magics[i] (names[0] takes the rest; magics[0] unused)."""
    src, rest = "", index
    for i in range(len(names) - 1, 0, -1):
        src += fast_divmod_lines(f"{names[i]}_q", names[i], rest, sizes[i], magics[i], indent)
        rest = f"{names[i]}_q"
    return src + f"{indent}{names[0]} = {rest}\n"


def fast_divisor_params(names: tuple[str, ...]) -> list[Param]:
    """The multiplier (u32) and shift (i32) parameters of each named divisor."""
    return [p for n in names for p in (Param(f"dm_{n}", "u32"), Param(f"ds_{n}", "i32"))]


def fast_divisor_scalars(divisors: dict[str, int]) -> tuple[tuple[str, int], ...]:
    """Launch scalars dm_<name>, ds_<name> for each named divisor."""
    out: list[tuple[str, int]] = []
    for name, d in divisors.items():
        m, shift = fast_divisor(d)
        out += [(f"dm_{name}", m), (f"ds_{name}", shift)]
    return tuple(out)


TARGET_WAVES = 2             # auto split: fill at least this many waves of `sms` programs


def auto_splits(programs: int, most: int, sms: int) -> int:
    """Fewest reduction splits (at most `most`) that give TARGET_WAVES waves of `sms` programs without a
    mostly empty last wave (<= 10% idle)."""
    low = -(-TARGET_WAVES * sms // programs)
    if low <= 1 or most <= 1:
        return max(1, min(low, most))
    best, best_loss = low, 2.0
    for s in range(low, 2 * low + 1):
        total = programs * s
        loss = -(-total // sms) * sms / total
        if loss < best_loss - 1e-9:
            best, best_loss = s, loss
        if loss <= 1.1:
            break
    return min(best, most)


# -- the deterministic split reduce (igemm split-K, igemm and direct bwd_weight) -----------------------------
# Two entries sum the fp32 partials ws[s * E + e] over the splits s, and a launch runs one of them:
# - 'wide' (many elements): WIDE_BLOCK elements per program, one split after the other;
# - 'tall' (few elements, often many splits, where the wide walk would leave most SMs idle and wait on SPLITS
#   dependent loads): TALL_BLOCK elements per program, TALL_ROWS splits loaded at once and tree-summed.
# Either sums in an order fixed by the entry and SPLITS, so a result is the same on every run (no atomics).
REDUCE_KINDS = ("wide", "tall")
WIDE_BLOCK = 1024
TALL_BLOCK = 64              # 256 contiguous bytes per split row
TALL_ROWS = 32
TALL_BELOW_WAVES = 1.5       # tall when the wide entry would launch fewer programs than this many per SM
REDUCE_WARPS = 4


def reduce_fns(base: str) -> tuple[str, str]:
    """The (wide, tall) entry names of a family's reduce."""
    return base, base + "_tall"


def reduce_grids(elements: int, sms: int, launch: bool = True) -> tuple[tuple[int, int, int], ...]:
    """The grids of the (wide, tall) reduce entries for `elements` outputs: one of them launches, neither when
    not `launch` (a single split: the main entry wrote the result itself)."""
    empty = (0, 1, 1)
    wide = -(-elements // WIDE_BLOCK)
    if not launch:
        return empty, empty
    if wide >= TALL_BELOW_WAVES * max(1, sms):
        return (wide, 1, 1), empty
    return empty, (-(-elements // TALL_BLOCK), 1, 1)


def split_sum_lines(kind: str, extent: str, splits: str = "SPLITS", indent: str = "    ") -> str:
    """Source lines of a reduce entry of `kind` over the workspace: define E (int64, from `extent`), e (this
    program's elements, int64), ok (e < E) and acc (fp32, the sum over the {splits} partials)."""
    head = [f"E = ({extent}).to(tl.int64)"]
    if kind == "wide":
        lines = head + [f"e = tl.program_id(0).to(tl.int64) * {WIDE_BLOCK} + tl.arange(0, {WIDE_BLOCK})",
                        "ok = e < E", f"acc = tl.zeros(({WIDE_BLOCK},), dtype=tl.float32)",
                        f"for s in range(0, {splits}):",
                        "    acc += tl.load(ws_ptr + (s * E + e), mask=ok, other=0.0)"]
    else:
        lines = head + [f"e = tl.program_id(0).to(tl.int64) * {TALL_BLOCK} + tl.arange(0, {TALL_BLOCK})",
                        "ok = e < E", f"acc = tl.zeros(({TALL_BLOCK},), dtype=tl.float32)",
                        f"for s0 in range(0, {splits}, {TALL_ROWS}):",
                        f"    rs = s0 + tl.arange(0, {TALL_ROWS})",
                        ("    part = tl.load(ws_ptr + (rs.to(tl.int64)[:, None] * E + e[None, :]), "
                         f"mask=(rs < {splits})[:, None] & ok[None, :], other=0.0)"),
                        "    acc += tl.sum(part, axis=0)"]
    return "".join(f"{indent}{line}\n" for line in lines)
