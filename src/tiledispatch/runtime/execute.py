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
                   out_dtype: str | None = None, allow_tf32: bool = False) -> GemmArgs:
    if beta != 0 and c is None:
        c = out   # BLAS semantics: out = alpha*A@B + beta*out
    mode = bias_mode or ("col" if bias is not None else "none")
    return GemmArgs(a, b, out, c, bias, mode, tuple(d), alpha, beta, activation or "none", out_dtype, allow_tf32)


def _check_matches(problem: GemmProblem, derived: GemmProblem) -> None:
    for field in ("m", "n", "k", "batch", "dtype", "out_dtype", "layout", "epilogue"):
        if getattr(problem, field) != getattr(derived, field):
            raise BadInput(f"the tensors do not match the problem: {field} is {getattr(derived, field)!r} in the "
                           f"tensors and {getattr(problem, field)!r} in the problem", field=field)


def _round16(x: int) -> int:
    return -(-x // 16) * 16


def aligned_copy(t: Any, letter: str) -> Any:
    """Copy t into a fresh buffer whose leading dimension is a multiple of 16 elements; returns the view."""
    import torch

    rows, cols = t.shape[-2], t.shape[-1]
    batch = t.shape[:-2]
    if letter == "r":
        view = torch.empty(*batch, rows, _round16(cols), dtype=t.dtype, device=t.device)[..., :cols]
    else:
        view = torch.empty(*batch, cols, _round16(rows), dtype=t.dtype, device=t.device).transpose(-1, -2)[..., :rows, :]
    view.copy_(t)
    return view


def execute(registry: Registry, problem: GemmProblem | None, a: Any, b: Any, *, strategy: str = "auto",
            return_selection: bool = False, **kwargs: Any) -> Any:
    args = make_gemm_args(a, b, **kwargs)
    derived = problem_from_args(args)
    if problem is not None:
        _check_matches(problem, derived)
    selection = registry.select(derived, strategy)
    out = run_selection(selection, args)
    return (out, selection) if return_selection else out


def run_selection(selection: Selection, args: GemmArgs) -> Any:
    if not selection.padded:
        return selection.kernel.launch(args, selection.problem)
    layout = selection.problem.layout
    user_out = args.out
    padded = dataclasses.replace(args, a=aligned_copy(args.a, layout[0]), b=aligned_copy(args.b, layout[1]), out=None)
    if user_out is not None:
        padded.out = aligned_copy(user_out, "r") if args.c is user_out else _empty_aligned_like(user_out)
        if args.c is user_out:
            padded.c = padded.out
    result = selection.kernel.launch(padded, selection.problem)
    if user_out is None:
        return result.contiguous()
    user_out.copy_(result)
    return user_out


def _empty_aligned_like(t: Any) -> Any:
    import torch

    rows, cols = t.shape[-2], t.shape[-1]
    return torch.empty(*t.shape[:-2], rows, _round16(cols), dtype=t.dtype, device=t.device)[..., :cols]
