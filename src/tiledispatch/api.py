"""The one-call API on torch tensors, over default registries built lazily from the essential presets."""
from __future__ import annotations

import threading
from typing import Any

from tiledispatch.problems.gemm import Epilogue, GemmProblem
from tiledispatch.registry.registry import Registry

_LOCK = threading.Lock()
_DEFAULTS: dict[tuple, Registry] = {}


def default_registry(problem: GemmProblem) -> Registry:
    """The registry td.gemm uses for problems like this one: the essential preset of its dtype and layout,
    specialised to its epilogue, built (or loaded from the cache) on first use."""
    key = (problem.dtype, problem.layout, problem.epilogue)
    with _LOCK:
        if key not in _DEFAULTS:
            registry = Registry()
            registry.add_preset(f"gemm_{problem.dtype}_{problem.layout}_essential", problem.epilogue)
            report = registry.build()
            if report.failed:
                import logging

                logging.getLogger("tiledispatch").warning("default registry: %d kernels failed to build: %s",
                                                          len(report.failed), report.failed)
            _DEFAULTS[key] = registry
        return _DEFAULTS[key]


def gemm(a: Any, b: Any, *, bias: Any = None, d: tuple = (), activation: str | None = None, alpha: float = 1.0,
         beta: float = 0.0, out: Any = None, out_dtype: str | None = None, c: Any = None,
         bias_mode: str | None = None, allow_tf32: bool = False, strategy: str = "auto") -> Any:
    """out = activation(alpha * a @ b + beta * c + bias + sum(d)), computed by the selected kernel.

    a: (M, K) or (batch, M, K); b: (K, N) or (batch, K, N), row- or column-major. bias has N values
    (per column, the default) or M values with bias_mode="row". With beta != 0 and no `c`, `out` is read
    as C (BLAS semantics). CUDA tensors run compiled kernels; CPU tensors run on Triton's interpreter.
    """
    from tiledispatch.runtime.arguments import problem_from_args
    from tiledispatch.runtime.execute import make_gemm_args, run_selection

    args = make_gemm_args(a, b, out=out, c=c, bias=bias, bias_mode=bias_mode, d=d, activation=activation,
                          alpha=alpha, beta=beta, out_dtype=out_dtype, allow_tf32=allow_tf32)
    problem = problem_from_args(args)
    selection = default_registry(problem).select(problem, strategy)
    return run_selection(selection, args)


__all__ = ["Epilogue", "GemmProblem", "default_registry", "gemm"]
