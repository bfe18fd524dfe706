"""Copies of a padded GEMM's operands into the corners of their kept zero-padded buffers (runtime/padding.py).

Each operand is copied in the widest words its rows allow (word_width: a 700-byte fp8 row is 175 int32). On
CUDA the copies run kernels/pad_copy.py, two operands per launch: the first copies of a call signature compile
it through Triton's JIT (which specializes it on the words, the sources' alignment and the sizes and strides,
which the signature fixes) and keep a direct launch of it (runtime/raw_launch.py: Triton's C launch function),
which later calls fire with the callers' tensors as they are (the kernel reads their words through the base
address). Elsewhere (the interpreter's CPU tensors),
and for operands whose views have no unit-stride rows, torch copies."""
from __future__ import annotations

import dataclasses
from typing import Any

from tiledispatch.runtime.launcher import cuda_runtime
from tiledispatch.runtime.raw_launch import raw_launch

_WORDS = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


def word_width(t: Any) -> int:
    """The widest word (8, 4 or 2 bytes, else t's element size) that t's rows, laid along its unit stride, are
    made of: every stride but the unit one, the unit-stride size and the base address are multiples of it."""
    unit = -1 if t.stride(-1) == 1 else -2 if t.stride(-2) == 1 else None
    size = t.element_size()
    if unit is None:
        return size
    others = [s for i, s in enumerate(t.stride()) if i != t.dim() + unit]
    for width in (8, 4, 2):
        if width > size and all(x * size % width == 0 for x in (t.shape[unit], *others)) \
                and t.data_ptr() % width == 0:
            return width
    return size


def as_words(t: Any, width: int) -> Any:
    """t viewed as integers of `width` bytes along its unit stride (see word_width)."""
    import torch

    dtype = getattr(torch, _WORDS[width])
    if t.stride(-1) == 1 or width == t.element_size():
        return t.view(dtype)
    return t.transpose(-1, -2).view(dtype).transpose(-1, -2)


def rows_last(src: Any, dst: Any) -> tuple[Any, Any] | None:
    """(src, dst) as (batch x rows x cols) views whose cols run along a unit stride in both, or None."""
    if src.stride(-1) != 1 or dst.stride(-1) != 1:
        src, dst = src.transpose(-1, -2), dst.transpose(-1, -2)
    if src.stride(-1) != 1 or dst.stride(-1) != 1 or src.dim() > 3:
        return None
    return (src, dst) if src.dim() == 3 else (src.unsqueeze(0), dst.unsqueeze(0))


@dataclasses.dataclass
class Corner:
    """A kept zero-padded buffer and the view of its top-left corner that receives a caller's tensor; `width`:
    the word size of the copy (word_width of the corner and of the signature's first tensor)."""

    buf: Any
    view: Any
    width: int

    @classmethod
    def of(cls, t: Any, buf: Any) -> Corner:
        view = buf[..., : t.shape[-2], : t.shape[-1]]
        same_unit = (t.stride(-1) == 1) == (view.stride(-1) == 1)
        width = min(word_width(t), word_width(view)) if same_unit else t.element_size()
        return cls(buf, view, width)

    def words(self, t: Any) -> int:
        """The word size of copying t: the corner's, unless t's base is not aligned to it."""
        return self.width if t.data_ptr() % self.width == 0 else t.element_size()


class CornerCopies:
    """The copies of one call signature's operands (a list of (Corner, tensor) in a fixed order), two per
    launch; the direct launches are kept per (pair, word sizes, 16-byte alignment of the sources)."""

    def __init__(self) -> None:
        self.launches: dict[tuple, Any] = {}

    def __call__(self, pairs: list[tuple[Corner, Any]]) -> None:
        for start in range(0, len(pairs), 2):
            chunk = pairs[start:start + 2]
            key = (start, *((corner.words(t), t.data_ptr() % 16 == 0) for corner, t in chunk))
            fire = self.launches.get(key)
            if fire is not None:
                fire(*(t for _, t in chunk))
                continue
            fire = _first_copy(chunk)
            if fire is not None:
                self.launches[key] = fire


def _first_copy(chunk: list[tuple[Corner, Any]]) -> Any:
    """Copy the chunk's tensors into their corners; returns the direct launch for later tensors like them
    (None: torch copied)."""
    words = [corner.words(t) for corner, t in chunk]
    views = [rows_last(as_words(t, w), as_words(corner.view, w)) for (corner, t), w in zip(chunk, words)]
    if any(v is None for v in views) or chunk[0][1].device.type != "cuda":
        for (corner, t), w in zip(chunk, words):
            as_words(corner.view, w).copy_(as_words(t, w))
        return None
    from tiledispatch.kernels import pad_copy

    parts = [pad_copy.geometry(*src.shape, w, src.stride(), dst.stride())
             for (src, dst), w in zip(views, words)]
    if len(chunk) == 1:        # the second half of the launch repeats the first and never runs
        views, parts = views * 2, parts * 2
    (tiles0, ints0, block0), (tiles1, ints1, block1) = parts
    programs = tiles0 + (tiles1 if len(chunk) == 2 else 0)
    ints = (tiles0, *ints0, *ints1, pad_copy.ROWS, block0, block1)
    buffers = [corner.buf for corner, _ in chunk] * (3 - len(chunk))
    rt, index = cuda_runtime(), chunk[0][1].device.index
    with rt.device(index):
        kernel = pad_copy.pad_copy_kernel[(programs,)](views[0][0], views[0][1], views[1][0], views[1][1],
                                                       *ints)
    stream = rt.raw_stream
    direct = raw_launch(kernel, ())
    if direct is None:       # a build that needs scratch: Triton's launcher, which allocates it
        run, function, packed = kernel.run, kernel.function, kernel.packed_metadata
        def direct(gx, gy, gz, s, args):
            return run(gx, gy, gz, s, function, packed, None, None, None, *args)

    def fire(*sources: Any) -> None:
        src = sources * (3 - len(sources))    # one source: the idle second half repeats it, as compiled
        direct(programs, 1, 1, stream(index), [src[0], buffers[0], src[1], buffers[1], *ints])
    return fire
