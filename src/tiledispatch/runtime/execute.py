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


def padded_to(t: Any, rows: int, cols: int, letter: str) -> Any:
    """A zero-filled (rows x cols) matrix in layout `letter` ('r'/'c') holding t in its top-left corner."""
    import torch

    batch = tuple(t.shape[:-2])
    if letter == "r":
        buf = torch.zeros(*batch, rows, cols, dtype=t.dtype, device=t.device)
    else:
        buf = torch.zeros(*batch, cols, rows, dtype=t.dtype, device=t.device).transpose(-1, -2)
    buf[..., : t.shape[-2], : t.shape[-1]].copy_(t)
    return buf


def pad_args(args: GemmArgs, padded: GemmProblem) -> GemmArgs:
    """Copies of every operand padded to the sizes of `padded` (see GemmProblem.padded16)."""
    import torch

    p = padded
    bias = None
    if args.bias is not None:
        length = p.m if args.bias_mode == "row" else p.n
        bias = torch.zeros(*args.bias.shape[:-1], length, dtype=args.bias.dtype, device=args.bias.device)
        bias[..., : args.bias.shape[-1]].copy_(args.bias)
    return dataclasses.replace(
        args, a=padded_to(args.a, p.m, p.k, p.layout[0]), b=padded_to(args.b, p.k, p.n, p.layout[1]), out=None,
        c=padded_to(args.c, p.m, p.n, "r") if args.c is not None else None, bias=bias,
        d=tuple(padded_to(t, p.m, p.n, "r") for t in args.d))


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
    """Run a selection; a padded one runs on padded copies and writes the exact result back."""
    if not selection.padded:
        return selection.kernel.launch(args, selection.problem)
    m, n = args.a.shape[-2], args.b.shape[-1]
    result = selection.kernel.launch(pad_args(args, selection.problem), selection.problem)[..., :m, :n]
    if args.out is None:
        return result.contiguous()
    args.out.copy_(result)
    return args.out
