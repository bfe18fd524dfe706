"""The one-call API on torch tensors: td.gemm and td.conv* (dispatch/entry.py, over the default registries of
dispatch/defaults.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from tiledispatch.dispatch import defaults
from tiledispatch.dispatch.entry import conv, conv_bwd_data, conv_bwd_weight, gemm

if TYPE_CHECKING:
    from tiledispatch.problems.conv import ConvProblem
    from tiledispatch.problems.gemm import GemmProblem
    from tiledispatch.registry.registry import Registry


def default_registry(problem: GemmProblem) -> Registry:
    """The registry td.gemm uses for problems like this one: the essential preset of its dtype and layout,
    specialised to its epilogue, and the vendor plan; built (or loaded from the cache) on first use."""
    return defaults.gemm_registry(problem)


def default_conv_registry(problem: ConvProblem) -> Registry:
    """The registry td.conv* use for problems like this one: the essential preset of its direction, dtype and
    ndim, specialised to its epilogue, and the vendor plan; built (or loaded from the cache) on first use."""
    return defaults.conv_registry(problem)


__all__ = ["conv", "conv_bwd_data", "conv_bwd_weight", "default_conv_registry", "default_registry", "gemm"]
