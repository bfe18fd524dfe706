"""The call path of td.gemm, td.conv* and Registry.run, top to bottom:

    arguments -> problem (derived and checked once) -> registry -> plans and selection (decide.select)
        -> bound launch -> run -> memo

A `Site` is where calls come from (td.* or one Registry): the memo of its decisions and the registry that
serves a problem. A repeated call of an argument signature whose decision is still valid goes straight to the
bound launch: one key, one dict lookup, one stamp comparison.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tiledispatch.dispatch import decide
from tiledispatch.dispatch.decide import Decision
from tiledispatch.dtypes import from_torch
from tiledispatch.errors import BadInput
from tiledispatch.kernels.conv_common import OUTPUT_ROLE
from tiledispatch.memo import Memo
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.registry.kernel import prepare
from tiledispatch.registry.store import KernelStore
from tiledispatch.runtime.arguments import GemmArgs, problem_from_args
from tiledispatch.runtime.conv_args import ConvArgs, conv_problem, plain_geometry
from tiledispatch.runtime.launcher import call_key, device_token, interpret_switch, tensor_key
from tiledispatch.runtime.padding import PaddedLaunch
from tiledispatch.runtime.tensor_checks import byte_extent, ranges_meet, require_tensor
from tiledispatch.select.selector import check_strategy

if TYPE_CHECKING:
    import torch


@dataclasses.dataclass
class Site:
    """Where calls come from: the memo of their decisions and the registry that serves a problem."""

    memo: Memo[Decision]
    registry_for: Callable[[Any], KernelStore]


# -- GEMM ----------------------------------------------------------------------------------------------------
def gemm(site: Site, a: Any, b: Any, out: Any, c: Any, bias: Any, bias_mode: str | None, d: Any,
         activation: str | None, alpha: Any, beta: Any, out_dtype: str | None, allow_tf32: bool,
         strategy: str, scale_a: Any, scale_b: Any,
         problem: GemmProblem | None = None) -> tuple[torch.Tensor, Decision]:
    """out = activation(alpha * a @ b + beta * c + bias + sum(d)) and the decision that computed it."""
    if beta != 0 and c is None:
        c = out   # BLAS semantics: out = alpha * A @ B + beta * out
    key = gemm_key(a, b, out, c, bias, d, beta, scale_a, scale_b, bias_mode, activation, out_dtype,
                   allow_tf32, strategy, problem)
    hit = site.memo.get(key)
    if (hit is not None and hit.stamp == hit.registry.stamp() and type(alpha) in REAL and type(beta) in REAL
            and (out is None or not meets(hit, out, a, b))):
        return hit.bound(a, b, out, c, bias, d, alpha, beta, scale_a, scale_b), hit
    args = gemm_args(a, b, out, c, bias, bias_mode, d, activation, alpha, beta, out_dtype, allow_tf32,
                     scale_a, scale_b)
    return first_gemm(site, key, args, strategy, problem)


def gemm_key(a: Any, b: Any, out: Any, c: Any, bias: Any, d: Any, beta: Any, scale_a: Any, scale_b: Any,
             bias_mode: str | None, activation: str | None, out_dtype: str | None, allow_tf32: bool,
             strategy: str, problem: GemmProblem | None = None) -> tuple | None:
    """The memo key of a GEMM call: every argument a decision reads (None for `tune`, which never
    remembers). `auto` reads the current GPU's tuning DB, so its key names the device."""
    if strategy == "tune":
        return None
    return call_key(a, b, out, c, bias, d, beta, scale_a, scale_b,
                    (bias_mode, activation, out_dtype, allow_tf32, strategy, problem,
                     device_token() if strategy == "auto" else None))


def gemm_args(a: Any, b: Any, out: Any, c: Any, bias: Any, bias_mode: str | None, d: Any,
              activation: str | None, alpha: Any, beta: Any, out_dtype: str | None, allow_tf32: bool,
              scale_a: Any, scale_b: Any) -> GemmArgs:
    """The GemmArgs of a call (bias per column unless bias_mode says otherwise)."""
    return GemmArgs(a, b, out, c, bias, bias_mode or ("col" if bias is not None else "none"),
                    tuple(d) if isinstance(d, (tuple, list)) else d, alpha, beta, activation or "none",
                    out_dtype, allow_tf32, scale_a, scale_b)


def first_gemm(site: Site, key: Any, args: GemmArgs, strategy: str, expected: GemmProblem | None
                ) -> tuple[Any, Decision]:
    check_strategy(strategy)
    problem = problem_from_args(args, prefer_layout=expected.layout if expected is not None else None)
    if expected is not None:
        _check_matches(expected, problem)
    registry = site.registry_for(problem)
    selection = decide.select(registry, problem, strategy)
    if selection.padded:
        bound: Any = PaddedLaunch(selection, args)
    else:
        bound = selection.kernel.bound_launch(args, selection.problem)   # allocates args.out when None
    out = bound(args.a, args.b, args.out, args.c, args.bias, args.d, args.alpha, args.beta, args.scale_a,
                args.scale_b)
    decision = Decision(selection, bound, registry, registry.stamp())
    if key is not None and bound.reusable:
        decision.extents = _extents(args.out, args.a, args.b)
        site.memo.put(key, decision)
    return out, decision


REAL = (int, float)   # scalars a remembered decision takes without checking them


def _extents(out: Any, *inputs: Any) -> tuple[int, ...]:
    """Byte extents of a signature's written tensor and inputs (fixed by shapes and strides)."""
    return tuple(byte_extent(t) if t is not None else 0 for t in (out, *inputs))


def meets(hit: Decision, out: Any, *inputs: Any) -> bool:
    """Whether a remembered call's `out` shares memory with one of its inputs (the checked path then names
    it)."""
    extents = hit.extents
    if not extents:
        return True
    start, span = out.data_ptr(), extents[0]
    for t, extent in zip(inputs, extents[1:]):
        if t is not None and ranges_meet(start, span, t.data_ptr(), extent):
            return True
    return False


def _check_matches(problem: GemmProblem, derived: GemmProblem) -> None:
    for field in ("m", "n", "k", "batch", "dtype", "out_dtype", "layout", "epilogue"):
        if getattr(problem, field) != getattr(derived, field):
            raise BadInput(f"the tensors do not match the problem: {field} is {getattr(derived, field)!r} in "
                           f"the tensors and {getattr(problem, field)!r} in the problem", field=field)


# -- convolution ---------------------------------------------------------------------------------------------
# the two tensors a direction reads, by forward role, in call order
INPUT_ROLES = {"fwd": ("x", "w"), "bwd_data": ("y", "w"), "bwd_weight": ("x", "y")}
# per direction, the positions of x, w and y in (first input, second input, output)
_SLOTS = {d: tuple((*INPUT_ROLES[d], OUTPUT_ROLE[d]).index(role) for role in ("x", "w", "y"))
          for d in INPUT_ROLES}
_CALLER_NAMES = {"fwd": ("x", "w", "out"), "bwd_data": ("dy", "w", "out"), "bwd_weight": ("x", "dy", "out")}


def role_tuple(direction: str, first: Any, second: Any, out: Any = None, bias: Any = None) -> tuple:
    """(x, w, y, bias) of a call: its two inputs in call order and its output (None: to be allocated)."""
    given = (first, second, out)
    i, j, k = _SLOTS[direction]
    return given[i], given[j], given[k], bias


# The shape-fixing arguments of a td.conv* call, from which a first call derives its problem:
# (direction, x_shape, w_shape, stride, padding, dilation, groups), hashable (lists made tuples by the caller)
Geometry = tuple


def conv(site: Site, direction: str, first: Any, second: Any, shape: Geometry | ConvProblem, bias: Any,
         activation: str | None, out: Any, strategy: str) -> tuple[torch.Tensor, Decision]:
    """The tensor a convolution direction writes (y, dx or dw) and the decision that computed it. `shape` is
    the call's Geometry (td.conv*) or a ConvProblem (Registry.run)."""
    key = conv_key(first, second, shape, bias, activation, out, strategy)
    hit = site.memo.get(key)
    if (hit is not None and hit.stamp == hit.registry.stamp()
            and (out is None or not meets(hit, out, first, second))):
        return hit.bound(*role_tuple(direction, first, second, out, bias)), hit
    return first_conv(site, key, direction, first, second, shape, bias, activation, out, strategy)


def conv_key(first: Any, second: Any, shape: Any, bias: Any, activation: str | None, out: Any,
              strategy: str) -> tuple | None:
    """Every argument a decision reads (tensors by shape, strides, dtype, device and alignment), or None for
    `tune` and for arguments that cannot be keys (the checked path names the bad one)."""
    if strategy == "tune" or (type(shape) is tuple and not _plain(shape)):
        return None   # 1.0, True and np.int64(1) equal 1 as keys: such calls take the checked path every time
    try:
        key = (shape, activation, strategy, tensor_key(first), tensor_key(second),
               None if out is None else tensor_key(out), None if bias is None else tensor_key(bias),
               interpret_switch(), device_token() if strategy == "auto" else None)
        hash(key)
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return None
    return key


def _plain(shape: tuple) -> bool:
    """Whether a Geometry's stride / padding / dilation / groups are exactly ints or tuples of them (the
    common all-int case checked inline)."""
    _, _, _, stride, padding, dilation, groups = shape
    if type(stride) is int and type(padding) is int and type(dilation) is int and type(groups) is int:
        return True
    return plain_geometry(stride, padding, dilation, groups)


def first_conv(site: Site, key: Any, direction: str, first: Any, second: Any, shape: Any, bias: Any,
                activation: str | None, out: Any, strategy: str) -> tuple[Any, Decision]:
    names = _CALLER_NAMES[direction]
    _check_pair(first, second, names)
    check_strategy(strategy)
    args = ConvArgs(*role_tuple(direction, first, second, out, bias))
    if isinstance(shape, ConvProblem):
        problem = shape
    else:
        _, x_shape, w_shape, stride, padding, dilation, groups = shape
        x_field = "input_shape" if direction == "bwd_data" else names[0]
        w_field = "weight_shape" if direction == "bwd_weight" else "w"
        problem = conv_problem(direction, x_shape, w_shape, stride=stride, padding=padding, dilation=dilation,
                               groups=groups, dtype=from_torch(first.dtype, names[0]), bias=bias is not None,
                               activation=activation or "none", x_field=x_field, w_field=w_field,
                               dtype_field=names[0])
    checked = prepare(problem, args)
    registry = site.registry_for(checked)
    selection = decide.select(registry, checked, strategy)
    bound = selection.kernel.bound_launch(args, checked)
    decision = Decision(selection, bound, registry, registry.stamp())
    if key is not None and bound.reusable:
        decision.extents = _extents(out, first, second)
        site.memo.put(key, decision)
    return bound(args.x, args.w, args.y, args.bias), decision


def _check_pair(first: Any, second: Any, names: tuple[str, str, str]) -> None:
    """The two input tensors of a call: torch tensors of one dtype on one device."""
    for field, t in zip(names, (first, second)):
        require_tensor(t, field)
    if first.dtype != second.dtype:
        raise BadInput(f"{names[1]} is {second.dtype} but {names[0]} is {first.dtype}: the tensors must have "
                       "one dtype", field=names[1])
    if first.device != second.device:
        raise BadInput(f"{names[1]} is on {second.device} but {names[0]} is on {first.device}",
                       field=names[1])
