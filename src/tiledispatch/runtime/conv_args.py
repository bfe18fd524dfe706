"""Tensors of a convolution call -> validated ConvProblem and the kernel's run-time argument values.

Tensors have torch's logical shapes: input (N, C, *spatial), weight (K, C/G, *filter), output (N, K, *out),
stored channels-last (channel stride 1: torch `channels_last` / `channels_last_3d`; for 1D a (N, L, C)
tensor transposed to (N, C, L)). Other memory formats raise BadInput; nothing is copied. The stride of a dim
of size 1 never matters: check_args gives such dims the stride a dense channels-last tensor has there (a
view), so kernels that derive pixel or row strides from the strides read the right ones. Errors name the
caller's argument (CALLER_FIELDS: x, w, dy, out, bias).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from tiledispatch.dtypes import from_torch, torch_dtype
from tiledispatch.errors import BadInput, BadInputType
from tiledispatch.kernels.conv_common import DIMS, OUTPUT_ROLE
from tiledispatch.problems.bounds import size
from tiledispatch.problems.conv import CONV_DTYPES, ConvProblem, channel_align
from tiledispatch.runtime.tensor_checks import check_written, require_tensor

# the caller's name of each role's tensor (x input, w weight, y output) as td.conv(x, w, out=),
# td.conv_bwd_data(dy, w, out=) and td.conv_bwd_weight(x, dy, out=) take them
CALLER_FIELDS = {"fwd": {"x": "x", "w": "w", "y": "out"},
                 "bwd_data": {"y": "dy", "w": "w", "x": "out"},
                 "bwd_weight": {"x": "x", "y": "dy", "w": "out"}}
# ConvKernel.run(problem, x=, w=, y=) takes the tensors by role keyword
KERNEL_FIELDS = {"x": "x", "w": "w", "y": "y"}
# what each role's tensor is in a direction (for messages)
MEANINGS = {"fwd": {"x": "input", "w": "weight", "y": "output"},
            "bwd_data": {"x": "dx", "w": "weight", "y": "dy"},
            "bwd_weight": {"x": "input", "w": "dw", "y": "dy"}}


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
    require_tensor(t, field)
    if tuple(t.shape) != shape:
        raise BadInput(f"{field} has shape {tuple(t.shape)}; expected {shape}", field=field)
    if from_torch(t.dtype, field) != dtype:
        raise BadInput(f"{field} is {t.dtype} but the problem needs {torch_dtype(dtype)}", field=field)
    if device is not None and t.device != device:
        raise BadInput(f"{field} is on {t.device} but the other tensors are on {device}", field=field)
    if t.stride(1) != 1 and shape[1] != 1:
        fmt = {3: "a (N, L, C) tensor transposed to (N, C, L)", 4: "torch.channels_last",
               5: "torch.channels_last_3d"}[len(shape)]
        raise BadInput(f"{field} has strides {tuple(t.stride())}: kernels read channels-last tensors "
                       f"(channel stride 1); convert explicitly ({fmt}, e.g. .contiguous(memory_format=...))",
                       field=field)


def canonical(t: Any) -> Any:
    """t, or a view of it whose dims of size 1 have the strides of a dense channels-last tensor there (the
    next inner dim's stride times its size; the channel dim's: 1). Such strides address nothing, but kernels
    read pixel and row strides from the tensor's strides."""
    strides = list(t.stride())
    shape = t.shape
    inner = 1
    for dim in (1, *range(t.dim() - 1, 1, -1), 0):   # channels, the spatial dims inner to outer, the batch
        if shape[dim] == 1:
            strides[dim] = inner
        inner = strides[dim] * shape[dim]
    if tuple(strides) == t.stride():
        return t
    return t.as_strided(shape, strides, t.storage_offset())


def check_args(problem: ConvProblem, args: ConvArgs, fields: dict[str, str] | None = None) -> None:
    """Every tensor present is a torch tensor with its role's shape, dtype and device, channels-last; the
    inputs are present; a given written tensor shares no memory with the inputs nor among its elements.
    `fields` names each role's tensor as the caller passed it (default CALLER_FIELDS of the direction).
    Each tensor of `args` is replaced by canonical(tensor) (itself unless a size-1 dim has another stride)."""
    direction = problem.direction
    names = fields or CALLER_FIELDS[direction]
    written = OUTPUT_ROLE[direction]
    want = shapes(problem)
    device = None
    for role in ("x", "w", "y"):
        t = args.get(role)
        if t is None:
            if role != written:
                raise BadInput(f"{names[role]} ({MEANINGS[direction][role]}) is missing for direction "
                               f"{direction!r}", field=names[role])
            continue
        dtype = problem.out_dtype if role == written else problem.dtype
        _check_tensor(t, names[role], want[role], dtype, device)
        device = t.device
        setattr(args, role, canonical(t))
    _check_bias(problem, args, device)
    out = args.get(written)
    if out is not None:
        reads = [(names[role], args.get(role)) for role in ("x", "w", "y") if role != written]
        check_written(out, names[written], [*reads, ("bias", args.bias)])


def _check_bias(problem: ConvProblem, args: ConvArgs, device: Any) -> None:
    b = args.bias
    if not problem.bias:
        if b is not None:
            raise BadInput("bias given but the problem has bias=False", field="bias")
        return
    if b is None:
        raise BadInput(f"bias is missing: the problem adds a bias (a contiguous ({problem.k},) tensor)",
                       field="bias")
    require_tensor(b, "bias")
    if tuple(b.shape) != (problem.k,) or (b.stride(0) != 1 and problem.k != 1):
        raise BadInput(f"bias has shape {tuple(b.shape)} and strides {tuple(b.stride())}: a contiguous "
                       f"({problem.k},) tensor is needed", field="bias")
    if b.dtype != torch_dtype(problem.out_dtype) or b.device != device:
        raise BadInput(f"bias is {b.dtype} on {b.device}: it must be {torch_dtype(problem.out_dtype)} on "
                       f"{device}", field="bias")


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
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, dtype: str,
                 out_dtype: str | None = None, bias: bool = False, activation: str = "none",
                 x_field: str = "x", w_field: str = "w", dtype_field: str = "dtype") -> ConvProblem:
    """The problem of tensors with these input and weight shapes (checked against each other; `x_field` and
    `w_field` name where the caller gave each shape: a tensor's name, or input_shape / weight_shape;
    `dtype_field` the tensor whose dtype `dtype` is)."""
    x_shape, w_shape = _shape(x_shape, x_field), _shape(w_shape, w_field)
    if len(x_shape) not in (3, 4, 5):
        raise BadInput(f"{x_field} has {len(x_shape)} dims; expected 3, 4 or 5 (N, C, *spatial)",
                       field=x_field)
    if len(w_shape) != len(x_shape):
        raise BadInput(f"{w_field} has shape {w_shape}; expected {len(x_shape)} dims like {x_field}",
                       field=w_field)
    groups = size(groups, "groups")
    n, c, spatial = x_shape[0], x_shape[1], x_shape[2:]
    k, filt = w_shape[0], w_shape[2:]
    if c % groups or k % groups:
        raise BadInput(f"groups={groups} must divide the input channels {c} and the output channels {k}",
                       field="groups")
    if w_shape[1] * groups != c:
        raise BadInput(f"{w_field} has shape {w_shape}: its second dim must be C/groups = {c // groups}",
                       field=w_field)
    if dtype not in CONV_DTYPES:
        raise BadInput(f"{dtype_field} has dtype {dtype}, not a conv dtype; legal: {', '.join(CONV_DTYPES)}",
                       field=dtype_field)
    return ConvProblem(direction, n, c, k, groups, spatial, filt, stride, padding, dilation, dtype, out_dtype,
                       bias=bias, activation=activation)


def _shape(value: Any, field: str) -> tuple[int, ...]:
    """A tensor shape: a tuple (or list, torch.Size) of positive ints within the size bound."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
        raise BadInputType(f"{field} must be a shape (a tuple of ints), got {type(value).__name__}",
                           field=field)
    if all(type(v) is int for v in value) and min(value, default=1) <= 0:
        raise BadInput(f"{field} has shape {tuple(value)}: an empty convolution; sizes must be positive "
                       "(tiledispatch.nn's layers run torch's own layer on an empty batch)", field=field)
    return tuple(size(v, field) for v in value)


def plain_geometry(*values: Any) -> bool:
    """Whether stride / padding / dilation / groups arguments are exactly ints or (nested) tuples of ints:
    what a memo key may hold without the checks of ConvProblem (1.0, True and np.int64(1) equal 1 as keys,
    so a remembered decision must not answer for them)."""
    return all(type(v) is int or (type(v) is tuple and plain_geometry(*v)) for v in values)


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
