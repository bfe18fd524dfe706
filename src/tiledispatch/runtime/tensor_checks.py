"""Checks every tensor argument of a GEMM or convolution call shares, before any kernel is chosen or built:
a torch tensor (not a list or NumPy array) of the strided layout on a device kernels run on ('cuda', or 'cpu'
through Triton's interpreter; 'meta' and others refused), a scalar that is a real number, and a written tensor
(`out`) that shares no memory with the call's inputs and whose elements do not overlap each other (a stride-0
or folded `out` would be written by several programs at once). Each check raises the typed error of the
hierarchy naming the caller's argument.
"""
from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any

from tiledispatch.errors import BadInput, BadInputType

DEVICE_TYPES = ("cuda", "cpu")


def require_tensor(t: Any, field: str) -> None:
    """t is a strided torch tensor on a device kernels run on (BadInputType / BadInput naming `field`)."""
    import torch

    if not isinstance(t, torch.Tensor):
        hint = " (convert it with torch.from_numpy)" if type(t).__module__ == "numpy" else ""
        kind = f"{type(t).__module__}.{type(t).__name__}"
        raise BadInputType(f"{field} must be a torch tensor, got {kind}{hint}", field=field)
    if t.layout != torch.strided:
        raise BadInput(f"{field} has layout {t.layout}; kernels read strided (dense) tensors", field=field)
    if t.device.type not in DEVICE_TYPES:
        raise BadInput(f"{field} is on device {t.device}; kernels run on 'cuda' devices, or on 'cpu' through "
                       "Triton's interpreter", field=field)


def require_real(value: Any, field: str) -> None:
    """value is a real number (int, float or a NumPy scalar of them; bools, strings, tensors refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise BadInputType(f"{field}={value!r} ({type(value).__name__}) must be a real number (int or float)",
                           field=field)


def plain_scalars(*values: Any) -> bool:
    """Whether every value is exactly an int or a float: what a remembered decision may take without
    require_real (a memo key does not hold scalar values, so a hit must not skip their check)."""
    return all(type(v) is float or type(v) is int for v in values)


def byte_extent(t: Any) -> int:
    """Bytes from t's first addressed element to one past its last (strides are never negative; 0 for an
    empty tensor). Fixed by shape, strides and dtype: a memo entry may keep it for its signature."""
    if t.numel() == 0:
        return 0
    return (sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) + 1) * t.element_size()


def ranges_meet(start: int, extent: int, other_start: int, other_extent: int) -> bool:
    """Whether [start, start + extent) and [other_start, other_start + other_extent) intersect."""
    return (extent > 0 and other_extent > 0
            and start < other_start + other_extent and other_start < start + extent)


def overlaps(x: Any, y: Any) -> bool:
    """Whether two tensors of one device may share memory (their address ranges intersect; empty tensors
    share nothing). A repeated call of one signature may compare data_ptr() with remembered byte_extent()s
    through ranges_meet instead (about 1 us for three tensors)."""
    return ranges_meet(x.data_ptr(), byte_extent(x), y.data_ptr(), byte_extent(y))


def same_elements(x: Any, y: Any) -> bool:
    """Whether two tensors address exactly the same elements in the same order."""
    return (x.data_ptr() == y.data_ptr() and x.shape == y.shape and x.stride() == y.stride()
            and x.dtype == y.dtype)


def self_overlapping(t: Any) -> bool:
    """Whether two elements of t may be one memory location: true unless, taking the dims of more than one
    element by increasing stride, each stride passes every element of the dims inside it (a stride 0, or rows
    closer than their length, overlap; interleaved layouts are refused too, as not provably apart)."""
    dims = sorted((stride, size) for size, stride in zip(t.shape, t.stride()) if size > 1)
    reach = 0
    for stride, size in dims:
        if stride <= reach:
            return True
        reach += (size - 1) * stride
    return False


def check_written(out: Any, field: str, inputs: Iterable[tuple[str, Any]], elementwise: tuple[str, ...] = ()
                  ) -> None:
    """The tensor a call writes: no two of its elements in one location, and no memory shared with an input,
    except an input named in `elementwise` that is the very same elements (read at the element written, as
    C with beta != 0 or a D tensor: computing in place is then exact). BadInput naming `field`."""
    if self_overlapping(out):
        raise BadInput(f"{field} has shape {tuple(out.shape)} and strides {tuple(out.stride())}: some of "
                       "its elements share memory (a stride of 0, or rows closer than their length); pass a "
                       "tensor whose every element has its own memory (e.g. torch.empty)", field=field)
    for name, t in inputs:
        if t is None or t is out and name in elementwise:
            continue
        if overlaps(out, t) and not (name in elementwise and same_elements(out, t)):
            raise BadInput(f"{field} shares memory with the input {name}: kernels read the inputs while they "
                           f"write {field}, so the result would be wrong; pass a separate {field} tensor",
                           field=field)
