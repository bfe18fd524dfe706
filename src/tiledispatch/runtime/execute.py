"""Select-and-run on torch tensors, with exact padding when only aligned kernels fit."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tiledispatch.errors import BadInput
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.runtime.arguments import GemmArgs, problem_from_args
from tiledispatch.runtime.padding import run_padded

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


def execute(registry: Registry, problem: GemmProblem | None, a: Any, b: Any, *, strategy: str = "auto",
            return_selection: bool = False, **kwargs: Any) -> Any:
    args = make_gemm_args(a, b, **kwargs)
    selection = select_for(registry, problem, args, strategy)
    out = run_selection(selection, args)
    return (out, selection) if return_selection else out


def select_for(registry: Registry, problem: GemmProblem | None, args: GemmArgs, strategy: str) -> Selection:
    """The registry's selection for the problem of `args` (checked against `problem` when one is given)."""
    derived = problem_from_args(args, prefer_layout=problem.layout if problem is not None else None)
    if problem is not None:
        _check_matches(problem, derived)
    return registry.select(derived, strategy)


def run_selection(selection: Selection, args: GemmArgs) -> Any:
    """Run a selection; a padded one runs on kept zero-padded copies of the operands that need them
    (runtime/padding.py) and writes the exact result back when it could not write it in place."""
    if not selection.padded:
        return selection.kernel.launch(args, selection.problem)
    return run_padded(selection, args)
