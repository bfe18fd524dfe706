"""Select-and-run on torch tensors, with exact padding when only aligned kernels fit."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from tiledispatch.errors import BadInput
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.runtime.arguments import GemmArgs, problem_from_args

if TYPE_CHECKING:
    from tiledispatch.registry.registry import Registry
    from tiledispatch.select.selector import Selection


def make_gemm_args(a: Any, b: Any, *, out: Any = None, c: Any = None, bias: Any = None, bias_mode: str | None = None,
                   d: tuple = (), activation: str | None = None, alpha: float = 1.0, beta: float = 0.0,
                   out_dtype: str | None = None, allow_tf32: bool = False, scale_a: Any = None,
                   scale_b: Any = None) -> GemmArgs:
    if beta != 0 and c is None:
        c = out   # BLAS semantics: out = alpha*A@B + beta*out
    mode = bias_mode or ("col" if bias is not None else "none")
    return GemmArgs(a, b, out, c, bias, mode, tuple(d), alpha, beta, activation or "none", out_dtype, allow_tf32,
                    scale_a, scale_b)


def _check_matches(problem: GemmProblem, derived: GemmProblem) -> None:
    for field in ("m", "n", "k", "batch", "dtype", "out_dtype", "layout", "epilogue"):
        if getattr(problem, field) != getattr(derived, field):
            raise BadInput(f"the tensors do not match the problem: {field} is {getattr(derived, field)!r} in the "
                           f"tensors and {getattr(problem, field)!r} in the problem", field=field)


def _fits(t: Any, rows: int, cols: int, letter: str, align: int) -> bool:
    """Whether t can stand in for its padded copy: the padded sizes, major order `letter` ('r'/'c'), a 16-byte
    aligned base and a leading dimension that is a multiple of `align`."""
    major = t.stride(-1) == 1 if letter == "r" else t.stride(-2) == 1
    lead = t.stride(-2) if letter == "r" else t.stride(-1)
    return (tuple(t.shape[-2:]) == (rows, cols) and major and t.data_ptr() % 16 == 0
            and lead % align == 0 and all(s % align == 0 for s in t.stride()[:-2]))


def padded_to(t: Any, rows: int, cols: int, letter: str, align: int = 16) -> Any:
    """t itself when it fits (see _fits), else a (rows x cols) matrix in layout `letter` ('r'/'c') holding t in
    its top-left corner and zeros in the margin (one copy, the margin filled apart: no full-size memset)."""
    import torch

    if _fits(t, rows, cols, letter, align):
        return t
    batch = tuple(t.shape[:-2])
    if letter == "r":
        buf = torch.empty(*batch, rows, cols, dtype=t.dtype, device=t.device)
    else:
        buf = torch.empty(*batch, cols, rows, dtype=t.dtype, device=t.device).transpose(-1, -2)
    r, c = t.shape[-2], t.shape[-1]
    buf[..., :r, :c].copy_(t)
    if rows > r:
        buf[..., r:, :].zero_()
    if cols > c:
        buf[..., :r, c:].zero_()
    return buf


def pad_args(args: GemmArgs, padded: GemmProblem) -> GemmArgs:
    """The operands as `padded` (GemmProblem.padded) runs them: each one padded where its sizes grow or it is
    not aligned, the others used in place. The output is the caller's `out` when M and N stay and it fits,
    else None (the kernel allocates a padded one)."""
    import torch

    p, al = padded, padded.align
    bias = args.bias
    if bias is not None:
        length = p.m if args.bias_mode == "row" else p.n
        if bias.shape[-1] != length or bias.data_ptr() % 16 or bias.stride(-1) != 1:
            bias = torch.zeros(*args.bias.shape[:-1], length, dtype=args.bias.dtype, device=args.bias.device)
            bias[..., : args.bias.shape[-1]].copy_(args.bias)
    mn = (p.m, p.n)
    out = args.out if args.out is not None and _fits(args.out, *mn, "r", al) else None
    return dataclasses.replace(
        args, a=padded_to(args.a, p.m, p.k, p.layout[0], al), b=padded_to(args.b, p.k, p.n, p.layout[1], al),
        out=out, c=padded_to(args.c, *mn, "r", al) if args.c is not None else None, bias=bias,
        d=tuple(padded_to(t, *mn, "r", al) for t in args.d))


def execute(registry: Registry, problem: GemmProblem | None, a: Any, b: Any, *, strategy: str = "auto",
            return_selection: bool = False, **kwargs: Any) -> Any:
    args = make_gemm_args(a, b, **kwargs)
    derived = problem_from_args(args, prefer_layout=problem.layout if problem is not None else None)
    if problem is not None:
        _check_matches(problem, derived)
    selection = registry.select(derived, strategy)
    out = run_selection(selection, args)
    return (out, selection) if return_selection else out


def run_selection(selection: Selection, args: GemmArgs) -> Any:
    """Run a selection; a padded one runs on padded copies (of the operands that need them) and writes the
    exact result back when it could not write it in place."""
    if not selection.padded:
        return selection.kernel.launch(args, selection.problem)
    m, n = args.a.shape[-2], args.b.shape[-1]
    padded = pad_args(args, selection.problem)
    in_place = padded.out is not None     # (launch fills in the out it allocates)
    result = selection.kernel.launch(padded, selection.problem)
    if in_place:
        return result
    result = result[..., :m, :n]
    if args.out is None:
        return result.contiguous()
    args.out.copy_(result)
    return args.out
