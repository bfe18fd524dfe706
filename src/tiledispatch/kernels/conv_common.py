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


def dims(cfg: ConvConfig) -> tuple[str, ...]:
    return DIMS[cfg.ndim]


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


TARGET_WAVES = 2             # auto split: fill at least this many waves of `sms` programs


def auto_splits(programs: int, most: int, sms: int) -> int:
    """Fewest reduction splits (at most `most`) that give TARGET_WAVES waves of `sms` programs without a mostly
    empty last wave (<= 10% idle)."""
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
