"""The default registries of td.gemm / td.conv*: per (dtype, layout, epilogue) or (direction, dtype, ndim,
epilogue), the essential preset specialised to the epilogue, built (or loaded from the cache) on first use,
the vendor library's plan (cuBLAS / cuDNN through torch), which `auto` measures against the best of ours
on a GPU, and, where the space is ranked and a cost model serves the key, the key's full space declared on
demand (dispatch/space.py: `auto` ranks it and compiles its pick on first use). `GEMM` and `CONV` are the call
sites of td.gemm and td.conv*; `reset` forgets every default and decision."""
from __future__ import annotations

import logging
import threading

from tiledispatch.configs.vendor import VendorConfig
from tiledispatch.dispatch.call import Site
from tiledispatch.dispatch.space import declare_space
from tiledispatch.memo import Memo
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import Epilogue, GemmProblem
from tiledispatch.registry.registry import Registry

_LOCK = threading.Lock()
_REGISTRIES: dict[tuple, Registry] = {}
_LOG = logging.getLogger("tiledispatch")


def gemm_registry(problem: GemmProblem) -> Registry:
    """The registry td.gemm uses for problems like this one."""
    key = ("gemm", problem.dtype, problem.layout, problem.epilogue)
    return _built(key, f"gemm_{problem.dtype}_{problem.layout}_essential", problem.epilogue,
                  VendorConfig("gemm"), problem)


def conv_registry(problem: ConvProblem) -> Registry:
    """The registry td.conv* use for problems like this one."""
    key = ("conv", problem.direction, problem.dtype, problem.ndim, problem.activation, problem.bias)
    return _built(key, f"conv_{problem.direction}_{problem.dtype}_{problem.ndim}d_essential",
                  (problem.activation, problem.bias), VendorConfig("conv", problem.direction), problem)


def _built(key: tuple, preset: str, epilogue: Epilogue | tuple[str, bool], vendor: VendorConfig,
           problem: GemmProblem | ConvProblem) -> Registry:
    registry = _REGISTRIES.get(key)
    if registry is not None:
        return registry
    with _LOCK:
        if key not in _REGISTRIES:
            registry = Registry()
            registry.add_preset(preset, epilogue)
            registry.add(vendor)
            _LOG.info("building the default registry %s (%d kernels) on first use", preset, len(registry))
            report = registry.build()
            _LOG.info("default registry %s: %s", preset, report)
            if report.failed:
                _LOG.warning("default registry %s: %d kernels failed to build: %s", preset,
                             len(report.failed), report.failed)
            space = declare_space(registry, preset, problem, epilogue)
            if space is not None:
                _LOG.info("default registry %s: auto ranks the space %s (%d more kernels, compiled on "
                          "demand)", preset, space, len(registry.on_demand))
            _REGISTRIES[key] = registry
        return _REGISTRIES[key]


def registries() -> dict[tuple, Registry]:
    """The default registries built so far, by key."""
    return dict(_REGISTRIES)


def install(key: tuple, registry: Registry) -> None:
    """Use `registry` as the default registry of `key` (tests, benchmarks); forgets remembered decisions."""
    with _LOCK:
        _REGISTRIES[key] = registry
    GEMM.memo.clear()
    CONV.memo.clear()


def reset() -> None:
    """Forget every default registry and every decision of td.gemm / td.conv*."""
    with _LOCK:
        _REGISTRIES.clear()
    GEMM.memo.clear()
    CONV.memo.clear()


GEMM = Site(Memo(), gemm_registry)
CONV = Site(Memo(), conv_registry)
