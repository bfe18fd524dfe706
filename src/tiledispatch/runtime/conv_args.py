"""Tensors of a convolution call -> validated ConvProblem and the kernel's run-time argument values.

Tensors have torch's logical shapes: input (N, C, *spatial), weight (K, C/G, *filter), output (N, K, *out),
stored channels-last (channel stride 1: torch `channels_last` / `channels_last_3d`; for 1D a (N, L, C)
tensor transposed to (N, C, L)). Other memory formats raise BadInput; nothing is copied.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from tiledispatch.dtypes import from_torch, torch_dtype
from tiledispatch.errors import BadInput
from tiledispatch.kernels.conv_common import DIMS, OUTPUT_ROLE
from tiledispatch.problems.bounds import size
from tiledispatch.problems.conv import CONV_DTYPES, ConvProblem, channel_align

ROLE_FIELDS = {"x": "input", "w": "weight", "y": "output"}


@dataclasses.dataclass
class ConvArgs:
    """The tensors of one call by forward role: x input, w weight, y output. The direction's written tensor
    (fwd: y, bwd_data: x = dx, bwd_weight: w = dw) may be None (allocated channels-last); y is dy in the
    backward directions."""

    x: Any = None
    w: Any = None
    y: Any = None
    bias: Any = None

    def get(self, role: str) -> Any:
        return getattr(self, role)


def shapes(problem: ConvProblem) -> dict[str, tuple[int, ...]]:
    """Logical torch shapes of input, weight and output."""
    p = problem
    return {"x": (p.n, p.c, *p.spatial), "w": (p.k, p.c_per_group, *p.filter), "y": (p.n, p.k, *p.output)}


def empty_channels_last(shape: tuple[int, ...], dtype: Any, device: Any) -> Any:
    """An uninitialized tensor of logical shape (B, C, *S) with channel stride 1 (4-D / 5-D: torch's own
    channels-last formats, one call; 3-D: a permuted (B, S, C) tensor)."""
    import torch

    if len(shape) in (4, 5):
        fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
        return torch.empty(shape, dtype=dtype, device=device, memory_format=fmt)
    order = (0, *range(2, len(shape)), 1)
    storage = torch.empty(tuple(shape[i] for i in order), dtype=dtype, device=device)
    return storage.permute(0, len(shape) - 1, *range(1, len(shape) - 1))


def _check_tensor(t: Any, field: str, shape: tuple[int, ...], dtype: str, device: Any) -> None:
    if not hasattr(t, "dim") or tuple(t.shape) != shape:
        got = tuple(t.shape) if hasattr(t, "shape") else type(t).__name__
        raise BadInput(f"{field} has shape {got}; expected {shape}", field=field)
    if from_torch(t.dtype, f"{field}.dtype") != dtype:
        raise BadInput(f"{field} is {t.dtype} but the problem needs {torch_dtype(dtype)}", field=field)
    if t.device != device:
        raise BadInput(f"{field} is on {t.device} but the other tensors are on {device}", field=field)
    if t.stride(1) != 1 and shape[1] != 1:
        fmt = {3: "a (N, L, C) tensor transposed to (N, C, L)", 4: "torch.channels_last",
               5: "torch.channels_last_3d"}[len(shape)]
        raise BadInput(f"{field} has strides {tuple(t.stride())}: kernels read channels-last tensors (channel "
                       f"stride 1); convert explicitly ({fmt}, e.g. .contiguous(memory_format=...))", field=field)


def check_args(problem: ConvProblem, args: ConvArgs) -> None:
    """Every tensor present has its role's shape, dtype and device, channels-last; the inputs are present."""
    written = OUTPUT_ROLE[problem.direction]
    want = shapes(problem)
    first = next(t for t in (args.x, args.w, args.y) if t is not None)
    for role in ("x", "w", "y"):
        t = args.get(role)
        if t is None:
            if role != written:
                raise BadInput(f"{ROLE_FIELDS[role]} tensor missing for direction {problem.direction!r}",
                               field=ROLE_FIELDS[role])
            continue
        dtype = problem.out_dtype if role == written else problem.dtype
        _check_tensor(t, ROLE_FIELDS[role], want[role], dtype, first.device)
    if problem.bias:
        b = args.bias
        if b is None or tuple(b.shape) != (problem.k,) or b.stride(0) != 1:
            raise BadInput(f"bias must be a contiguous ({problem.k},) tensor", field="bias")
        if b.dtype != torch_dtype(problem.out_dtype) or b.device != first.device:
            raise BadInput(f"bias must be {torch_dtype(problem.out_dtype)} on {first.device}", field="bias")
    elif args.bias is not None:
        raise BadInput("bias given but the problem has bias=False", field="bias")


def tensor_align(problem: ConvProblem, args: ConvArgs) -> int:
    """The largest align a (of CONV_ALIGNS) the tensors guarantee: C and K multiples of a and, for a > 1, the
    activations (input, output) with 16-byte aligned bases and non-unit strides that are multiples of a. The
    weight (when given) must have a 16-byte aligned base and non-unit strides that are multiples of
    gcd(8, C/G), as every channels-last weight of its own allocation has: so kernels that also need
    C/G % 8 == 0 may read it in 16-byte vectors."""
    w_unit = math.gcd(8, problem.c_per_group)
    if args.w is not None and (args.w.data_ptr() % 16 or any(s % w_unit for s in args.w.stride() if s != 1)):
        return 1
    activations = [t for t in (args.x, args.y) if t is not None]
    if any(t.data_ptr() % 16 for t in activations):
        return 1
    strides = [s for t in activations for s in t.stride() if s != 1]
    return channel_align(problem.c, problem.k, *strides)


def conv_values(problem: ConvProblem, args: ConvArgs) -> dict[str, Any]:
    """Values of every run-time parameter a conv entry may have, by name (kernels/conv_common)."""
    p = problem
    values: dict[str, Any] = {"x_ptr": args.x, "w_ptr": args.w, "y_ptr": args.y, "N": p.n, "C": p.c, "K": p.k,
                              "G": p.groups, "CG": p.c_per_group, "KG": p.k_per_group}
    if args.bias is not None:
        values["bias_ptr"] = args.bias
    for i, s in enumerate(DIMS[p.ndim]):
        values.update({f"in_{s}": p.spatial[i], f"out_{s}": p.output[i], f"flt_{s}": p.filter[i],
                       f"str_{s}": p.stride[i], f"pad_{s}": p.padding[i][0], f"dil_{s}": p.dilation[i]})
    for role, lead in (("x", "n"), ("y", "n"), ("w", "k")):
        t = args.get(role)
        values[f"s{role}_{lead}"] = t.stride(0)
        for i, s in enumerate(DIMS[p.ndim]):
            values[f"s{role}_{s}"] = t.stride(2 + i)
    return values


def conv_problem(direction: str, x_shape: tuple[int, ...], w_shape: tuple[int, ...], *, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, dtype: str, out_dtype: str | None = None,
                 bias: bool = False, activation: str = "none") -> ConvProblem:
    """The problem of tensors with these input and weight shapes (checked against each other)."""
    if len(x_shape) not in (3, 4, 5):
        raise BadInput(f"input has {len(x_shape)} dims; expected 3, 4 or 5 (N, C, *spatial)", field="input")
    if len(w_shape) != len(x_shape):
        raise BadInput(f"weight has shape {tuple(w_shape)}; expected {len(x_shape)} dims like the input",
                       field="weight")
    groups = size(groups, "groups")
    n, c, spatial = x_shape[0], x_shape[1], tuple(x_shape[2:])
    k, filt = w_shape[0], tuple(w_shape[2:])
    if c % groups or k % groups:
        raise BadInput(f"groups={groups} must divide the input channels {c} and the output channels {k}",
                       field="groups")
    if w_shape[1] * groups != c:
        raise BadInput(f"weight has shape {tuple(w_shape)}: its second dim must be C/groups = {c // groups}",
                       field="weight")
    if dtype not in CONV_DTYPES:
        raise BadInput(f"dtype {dtype} is not a conv dtype; legal: {', '.join(CONV_DTYPES)}", field="dtype")
    return ConvProblem(direction, n, c, k, groups, spatial, filt, stride, padding, dilation, dtype, out_dtype,
                       bias=bias, activation=activation)


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
