"""The one-call API on torch tensors, over default registries built lazily from the essential presets."""
from __future__ import annotations

import threading
from typing import Any

from tiledispatch.problems.gemm import Epilogue, GemmProblem
from tiledispatch.registry.registry import Registry
from tiledispatch.runtime.launcher import call_key, device_token, remember

_LOCK = threading.Lock()


class _Versioned(dict):
    """A dict that counts its changes (td.gemm's memo checks that the default registries did not change)."""

    version = 0

    def _changed(self) -> None:
        self.version += 1

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self._changed()

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        self._changed()

    def pop(self, *args: Any) -> Any:
        self._changed()
        return super().pop(*args)

    def popitem(self) -> Any:
        self._changed()
        return super().popitem()

    def clear(self) -> None:
        super().clear()
        self._changed()

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        self._changed()

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._changed()
        return super().setdefault(key, default)


_DEFAULTS: dict[tuple, Registry] = _Versioned()
_MEMO: dict[tuple, tuple] = {}   # call_key + options -> (_DEFAULTS, its version, registry, Dispatch)


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
         bias_mode: str | None = None, allow_tf32: bool = False, strategy: str = "auto", scale_a: Any = None,
         scale_b: Any = None) -> Any:
    """out = activation(alpha * a @ b + beta * c + bias + sum(d)), computed by the selected kernel.

    a: (M, K) or (batch, M, K); b: (K, N) or (batch, K, N), row- or column-major. bias has N values
    (per column, the default) or M values with bias_mode="row". With beta != 0 and no `c`, `out` is read
    as C (BLAS semantics). scale_a / scale_b: one-element float32 tensors scaling fp8 operands. CUDA tensors
    run compiled kernels; CPU tensors run on Triton's interpreter. The first call of an argument signature
    validates, selects and binds; later calls of the same signature reuse that decision.
    """
    if beta != 0 and c is None:
        c = out   # BLAS semantics, as make_gemm_args
    options = (bias_mode, activation, out_dtype, allow_tf32, strategy, None,
               device_token() if strategy == "auto" else None)   # auto reads the tuning DB of the current GPU
    key = None if strategy == "tune" else call_key(a, b, out, c, bias, d, beta, scale_a, scale_b, options)
    hit = _MEMO.get(key)
    if hit is not None:
        defaults, version, registry, entry = hit
        if (entry.bound is not None and defaults is _DEFAULTS and version == defaults.version
                and entry.valid(registry)):
            return entry.bound(a, b, out, c, bias, d, alpha, beta, scale_a, scale_b)
    fields = {"out": out, "c": c, "bias": bias, "bias_mode": bias_mode, "d": d, "activation": activation,
              "alpha": alpha, "beta": beta, "out_dtype": out_dtype, "allow_tf32": allow_tf32, "scale_a": scale_a,
              "scale_b": scale_b}
    return _dispatch(key, hit, a, b, strategy, fields)


def _dispatch(key: tuple | None, hit: tuple | None, a: Any, b: Any, strategy: str, fields: dict[str, Any]) -> Any:
    """td.gemm past a bound launch: a remembered padded selection, or validate, select, run and remember."""
    defaults = _DEFAULTS
    version = getattr(defaults, "version", None)
    if hit is not None and hit[0] is defaults and hit[1] == version:
        registry = hit[2]
    else:
        from tiledispatch.runtime.arguments import problem_from_args
        from tiledispatch.runtime.execute import make_gemm_args

        registry = default_registry(problem_from_args(make_gemm_args(a, b, **fields)))
        version = getattr(defaults, "version", None)   # building the registry stored it
    out, entry = registry.dispatch(key, registry._memo.get(key), None, a, b, strategy, fields)
    if key is not None and version is not None and registry._memo.get(key) is entry:
        remember(_MEMO, key, (defaults, version, registry, entry))
    return out


__all__ = ["Epilogue", "GemmProblem", "default_registry", "gemm"]
