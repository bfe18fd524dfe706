"""Runs of a GEMM on zero-padded operands (a selection whose kernel needs larger or better aligned sizes).

The padded buffers of one call signature are allocated and zeroed once and kept (PAD_CACHE_LIMIT signatures;
none inside launcher.fresh_workspaces, where the custom ops run);
a repeated call copies in the operands that need it and reuses the kernel's bound launch. PaddedLaunch is the
bound launch of a padded selection that dispatch remembers. Without a caller's out, a result whose N grew is a
view of rows of the padded width. Details: docs/design/dispatch.md."""
from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.runtime.arguments import GemmArgs
from tiledispatch.runtime.launcher import cuda_runtime, keeping_buffers, tensor_key
from tiledispatch.runtime.operand_copy import Corner, CornerCopies

if TYPE_CHECKING:
    from tiledispatch.select.selector import Selection

PAD_CACHE_LIMIT = 8
_CACHE: OrderedDict[tuple, _Padded] = OrderedDict()
_LOCK = threading.Lock()


def fits(t: Any, rows: int, cols: int, letter: str, align: int) -> bool:
    """Whether t can stand in for its padded copy: the padded sizes, major order `letter` ('r'/'c'), a 16-byte
    aligned base and a leading dimension that is a multiple of `align`."""
    major = t.stride(-1) == 1 if letter == "r" else t.stride(-2) == 1
    lead = t.stride(-2) if letter == "r" else t.stride(-1)
    return (tuple(t.shape[-2:]) == (rows, cols) and major and t.data_ptr() % 16 == 0
            and lead % align == 0 and all(s % align == 0 for s in t.stride()[:-2]))


def zero_padded(t: Any, rows: int, cols: int, letter: str) -> Any:
    """A zeroed (batch x rows x cols) matrix in layout `letter` ('r'/'c'), of t's dtype and device."""
    import torch

    batch = tuple(t.shape[:-2])
    if letter == "r":
        return torch.zeros(*batch, rows, cols, dtype=t.dtype, device=t.device)
    return torch.zeros(*batch, cols, rows, dtype=t.dtype, device=t.device).transpose(-1, -2)


def _matrix_corner(t: Any, rows: int, cols: int, letter: str, align: int) -> Corner | None:
    """The corner a matrix is copied into, or None when it fits as it is."""
    return None if fits(t, rows, cols, letter, align) else Corner.of(t, zero_padded(t, rows, cols, letter))


def padded_to(t: Any, rows: int, cols: int, letter: str, align: int = 16) -> Any:
    """t itself when it fits (see fits), else a fresh zero-padded copy (rows x cols, layout `letter`)."""
    corner = _matrix_corner(t, rows, cols, letter, align)
    if corner is None:
        return t
    CornerCopies()([(corner, t)])
    return corner.buf


def _bias_buffer(bias: Any, length: int) -> Any:
    """The zero-padded buffer a bias is copied into, or None when it fits as it is."""
    if bias.shape[-1] == length and bias.data_ptr() % 16 == 0 and bias.stride(-1) == 1:
        return None
    import torch

    return torch.zeros(*bias.shape[:-1], length, dtype=bias.dtype, device=bias.device)


def _take(corner: Corner | None, t: Any) -> Any:
    """What a launch on the padded buffers reads for t: its corner's buffer, or t itself (used in place)."""
    return t if corner is None else corner.buf


@dataclasses.dataclass
class _Padded:
    """The padded buffers of one call signature. Output: the caller's `out` itself when it fits (in_place);
    else, when the caller gave an out, `out` is a kept padded buffer the result is copied back from. Without a
    caller's out, `out` is None: the launch allocates the padded problem's output per call and the caller gets
    its exact view (rows of the padded width when N grew: no copy back, and no caller ever holds a kept
    buffer)."""

    a: Corner | None       # None: the caller's tensor is used in place
    b: Corner | None
    c: Corner | None
    bias: Any             # the padded bias buffer, or None
    d: tuple[Corner | None, ...]
    in_place: bool
    out: Any
    copies: CornerCopies = dataclasses.field(default_factory=CornerCopies)
    bound: Any = None     # the kernel's BoundLaunch on these buffers, kept after the first launch

    @classmethod
    def prepare(cls, args: GemmArgs, p: GemmProblem) -> _Padded:
        import torch

        al, mn = p.align, (p.m, p.n)
        in_place = args.out is not None and fits(args.out, *mn, "r", al)
        out = None
        if args.out is not None and not in_place:
            shape = (*args.out.shape[:-2], *mn)
            out = torch.empty(shape, dtype=args.out.dtype, device=args.out.device)
        return cls(a=_matrix_corner(args.a, p.m, p.k, p.layout[0], al),
                   b=_matrix_corner(args.b, p.k, p.n, p.layout[1], al),
                   c=_matrix_corner(args.c, *mn, "r", al) if args.c is not None else None,
                   bias=(_bias_buffer(args.bias, p.m if args.bias_mode == "row" else p.n)
                         if args.bias is not None else None),
                   d=tuple(_matrix_corner(t, *mn, "r", al) for t in args.d), in_place=in_place, out=out)

    def args(self, args: GemmArgs) -> GemmArgs:
        """The call's arguments on the padded buffers (the caller's tensors copied in where needed)."""
        matrices = [(self.a, args.a), (self.b, args.b), (self.c, args.c), *zip(self.d, args.d)]
        self.copies([(corner, t) for corner, t in matrices if corner is not None])
        bias = args.bias
        if self.bias is not None:
            self.bias[..., : bias.shape[-1]].copy_(bias)
            bias = self.bias
        return GemmArgs(_take(self.a, args.a), _take(self.b, args.b), args.out if self.in_place else self.out,
                        _take(self.c, args.c), bias, args.bias_mode,
                        tuple(_take(corner, t) for corner, t in zip(self.d, args.d)), args.alpha, args.beta,
                        args.activation, args.out_dtype, args.allow_tf32, args.scale_a, args.scale_b)


def _signature(selection: Selection, args: GemmArgs) -> tuple:
    device = args.a.device
    stream = cuda_runtime().raw_stream(device.index) if device.type == "cuda" else None
    tensors = (args.a, args.b, args.out, args.c, args.bias, *args.d)
    return (selection.kernel, selection.problem, args.bias_mode, stream,
            tuple(None if t is None else tensor_key(t) for t in tensors))


def _padded_for(key: tuple, selection: Selection, args: GemmArgs) -> _Padded:
    """The kept buffers of a call signature; inside fresh_workspaces buffers for this call only (a
    cudagraph-tree warm-up allocates in the graph's pool and refuses tensors that outlive the run)."""
    if not keeping_buffers():
        return _Padded.prepare(args, selection.problem)
    with _LOCK:
        entry = _CACHE.get(key)
        if entry is not None:
            _CACHE.move_to_end(key)
            return entry
    entry = _Padded.prepare(args, selection.problem)
    with _LOCK:
        _CACHE[key] = entry
        while len(_CACHE) > PAD_CACHE_LIMIT:
            _CACHE.popitem(last=False)
    return entry


def clear_cache() -> None:
    """Drop every kept padded buffer (their memory returns to torch's allocator)."""
    with _LOCK:
        _CACHE.clear()


def run_padded(selection: Selection, args: GemmArgs) -> Any:
    """Run a padded selection: the result in the caller's out (when given) or in a new tensor of the exact
    size."""
    return _run(selection, args, _signature(selection, args))


def _run(selection: Selection, args: GemmArgs, key: tuple) -> Any:
    entry = _padded_for(key, selection, args)
    padded = entry.args(args)
    bound = entry.bound
    if bound is None:
        bound = selection.kernel.bound_launch(padded, selection.problem)   # allocates padded.out when None
        if bound.reusable:
            entry.bound = bound
    result = bound(padded.a, padded.b, padded.out, padded.c, padded.bias, padded.d, args.alpha, args.beta,
                   args.scale_a, args.scale_b)
    if entry.in_place:
        return result
    exact = result[..., : args.a.shape[-2], : args.b.shape[-1]]
    if args.out is not None:
        args.out.copy_(exact)
        return args.out
    return exact     # the launch's own output of this call (padded when M or N grew): its exact view


class PaddedLaunch:
    """The bound launch of a padded selection for the argument signature of `first` (a call's GemmArgs):
    called like a kernel's BoundLaunch with the tensors and scalars of a call of that signature (its options,
    such as the bias mode and activation, are the signature's); each stream gets its kept buffers
    (_Padded)."""

    reusable = True   # keyed by the call signature it was made for

    def __init__(self, selection: Selection, first: GemmArgs) -> None:
        self.selection = selection
        self.options = (first.bias_mode, first.activation, first.out_dtype, first.allow_tf32)
        device = first.a.device
        if device.type == "cuda":
            raw, index = cuda_runtime().raw_stream, device.index
            self.stream = lambda: raw(index)
        else:
            self.stream = lambda: None

    def __call__(self, a: Any, b: Any, out: Any, c: Any, bias: Any, d: Any, alpha: Any, beta: Any,
                 scale_a: Any = None, scale_b: Any = None) -> Any:
        mode, activation, out_dtype, tf32 = self.options
        args = GemmArgs(a, b, out, c, bias, mode, tuple(d), alpha, beta, activation, out_dtype, tf32, scale_a,
                        scale_b)
        return _run(self.selection, args, (self, self.stream()))
