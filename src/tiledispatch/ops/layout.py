"""Channels-last layouts and conv geometry shared by the custom ops, their fake kernels and the modules.

The real kernels and the fake kernels allocate outputs with the same function, so the strides torch.compile
plans with are the strides the kernels write. Inputs in another layout are copied into the canonical one
before td.* sees them.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tiledispatch.errors import BadInput

if TYPE_CHECKING:
    import torch


def channels_last_strides(shape: Sequence[Any]) -> tuple[Any, ...]:
    """Strides of a dense (B, C, *S) tensor stored as (B, *S, C): channel stride 1 for any rank >= 2."""
    sizes = list(shape)
    order = [0, *range(2, len(sizes)), 1]          # storage order, outermost first
    strides: list[Any] = [0] * len(sizes)
    step: Any = 1
    for dim in reversed(order):
        strides[dim] = step
        step = step * sizes[dim]
    return tuple(strides)


def empty_channels_last(shape: Sequence[Any], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An uninitialized (B, C, *S) tensor with `channels_last_strides` (for 4-D / 5-D the same strides
    torch.channels_last / channels_last_3d give for sizes > 1)."""
    import torch

    return torch.empty_strided(tuple(shape), channels_last_strides(shape), dtype=dtype, device=device)


_CANONICAL: dict[Any, tuple[int, ...]] = {}   # channels_last_strides by concrete shape (torch.Size)


def as_channels_last(t: torch.Tensor) -> torch.Tensor:
    """t itself when it already has the canonical channels-last strides; a view with them when only the
    strides of size-1 dims differ (they address no other element: the (N, C, 1, 1) tensors of
    squeeze-excitation blocks come as (C, 1, 1, 1), and a copy cost a kernel per conv and gradient under
    CUDA graphs); else a channels-last copy (t is a real tensor: its shape is made of ints)."""
    shape = t.shape
    strides = _CANONICAL.get(shape)
    if strides is None:
        if len(_CANONICAL) > 4096:
            _CANONICAL.clear()
        strides = _CANONICAL[shape] = channels_last_strides(shape)
    have = t.stride()
    if have == strides:
        return t
    if all(a == b or n == 1 for a, b, n in zip(have, strides, shape)):
        return t.as_strided(shape, strides)
    out = empty_channels_last(t.shape, t.dtype, t.device)
    out.copy_(t)
    return out


def per_dim(field: str, value: Any, ndim: int) -> list[int]:
    """An int or one int per spatial dim as a list of ndim ints."""
    values = [value] * ndim if isinstance(value, int) else list(value)
    if len(values) != ndim or not all(isinstance(v, int) for v in values):
        raise BadInput(f"{field}={value!r} must be an int or {ndim} ints", field=field)
    return values


def padding_pairs(value: Any, ndim: int) -> list[int]:
    """Padding as the flat list [left0, right0, left1, right1, ...] the op schemas take: from an int, one int
    per dim, or one (left, right) pair per dim."""
    if isinstance(value, int):
        return [value] * (2 * ndim)
    items = list(value)
    if len(items) == ndim and all(isinstance(v, int) for v in items):
        return [v for v in items for _ in (0, 1)]
    if len(items) == ndim and all(isinstance(v, (tuple, list)) and len(v) == 2 for v in items):
        return [int(side) for pair in items for side in pair]
    raise BadInput(f"padding={value!r} must be an int, {ndim} ints or {ndim} (left, right) pairs",
                   field="padding")


def pairs(flat: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """[l0, r0, l1, r1, ...] -> ((l0, r0), (l1, r1), ...): td.conv*'s padding argument."""
    return tuple((flat[i], flat[i + 1]) for i in range(0, len(flat), 2))


def same_padding(kernel: Sequence[int], dilation: Sequence[int]) -> list[int]:
    """padding='same' as torch computes it: dilation * (kernel - 1), the odd element on the right."""
    flat: list[int] = []
    for k, d in zip(kernel, dilation):
        total = d * (k - 1)
        flat += [total // 2, total - total // 2]
    return flat


def conv_output_size(spatial: Sequence[Any], kernel: Sequence[int], stride: Sequence[int],
                     padding: Sequence[int], dilation: Sequence[int]) -> list[Any]:
    """Output extents of a convolution (padding flat as in `padding_pairs`); SymInts pass through."""
    return [(size + padding[2 * i] + padding[2 * i + 1] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1
            for i, size in enumerate(spatial)]
