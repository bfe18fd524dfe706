"""The one-call API on torch tensors: td.gemm and td.conv* over the default registries (dispatch/defaults.py),
through the dispatch path (dispatch/call.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tiledispatch.dispatch import call, defaults
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import GemmProblem

if TYPE_CHECKING:
    import torch

    from tiledispatch.registry.registry import Registry

_GEMM, _CONV = defaults.GEMM, defaults.CONV


def default_registry(problem: GemmProblem) -> Registry:
    """The registry td.gemm uses for problems like this one: the essential preset of its dtype and layout,
    specialised to its epilogue, built (or loaded from the cache) on first use."""
    return defaults.gemm_registry(problem)


def default_conv_registry(problem: ConvProblem) -> Registry:
    """The registry td.conv* use for problems like this one: the essential preset of its direction, dtype and
    ndim, specialised to its epilogue, built (or loaded from the cache) on first use."""
    return defaults.conv_registry(problem)


def gemm(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None, d: tuple = (),
         activation: str | None = None, alpha: float = 1.0, beta: float = 0.0, out: torch.Tensor | None = None,
         out_dtype: str | None = None, c: torch.Tensor | None = None, bias_mode: str | None = None,
         allow_tf32: bool = False, strategy: str = "auto", scale_a: torch.Tensor | None = None,
         scale_b: torch.Tensor | None = None) -> torch.Tensor:
    """out = activation(alpha * a @ b + beta * c + bias + sum(d)), computed by the selected kernel.

    a: (M, K) or (batch, M, K); b: (K, N) or (batch, K, N), row- or column-major. bias has N values
    (per column, the default) or M values with bias_mode="row". With beta != 0 and no `c`, `out` is read
    as C (BLAS semantics). scale_a / scale_b: one-element float32 tensors scaling fp8 operands. CUDA tensors
    run compiled kernels; CPU tensors run on Triton's interpreter. The first call of an argument signature
    validates, selects and binds; later calls of the same signature reuse that decision.
    """
    return call.gemm(_GEMM, a, b, out, c, bias, bias_mode, d, activation, alpha, beta, out_dtype, allow_tf32,
                     strategy, scale_a, scale_b)[0]


def _shape(value: Any) -> Any:
    """A shape / stride / padding / dilation argument made hashable (lists to tuples)."""
    return tuple(_shape(v) for v in value) if type(value) is list else value


def conv(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, stride: Any = 1, padding: Any = 0,
         dilation: Any = 1, groups: int = 1, *, activation: str | None = None, out: torch.Tensor | None = None,
         strategy: str = "auto") -> torch.Tensor:
    """y = activation(conv(x, w) + bias): x (N, C, *spatial) and w (K, C/groups, *filter) channels-last
    (torch.channels_last / channels_last_3d; for 1-D a (N, L, C) tensor transposed to (N, C, L)); padding is
    an int, one per dim, or a (left, right) pair per dim. Returns y (N, K, *out) channels-last. The first call
    of an argument signature (as td.conv_bwd_data / td.conv_bwd_weight) checks, selects and binds; later calls
    of the same signature reuse that decision."""
    geometry = ("fwd", _field_shape(x, "x"), _field_shape(w, "w"), _shape(stride), _shape(padding),
                _shape(dilation), groups)
    return call.conv(_CONV, "fwd", x, w, geometry, bias, activation, out, strategy)[0]


def conv_bwd_data(dy: torch.Tensor, w: torch.Tensor, input_shape: Any, stride: Any = 1, padding: Any = 0,
                  dilation: Any = 1, groups: int = 1, *, out: torch.Tensor | None = None,
                  strategy: str = "auto") -> torch.Tensor:
    """dx (input_shape, channels-last): the gradient of conv(x, w) with respect to x, given dy."""
    geometry = ("bwd_data", _shape(input_shape), _field_shape(w, "w"), _shape(stride), _shape(padding),
                _shape(dilation), groups)
    return call.conv(_CONV, "bwd_data", dy, w, geometry, None, None, out, strategy)[0]


def conv_bwd_weight(x: torch.Tensor, dy: torch.Tensor, weight_shape: Any, stride: Any = 1, padding: Any = 0,
                    dilation: Any = 1, groups: int = 1, *, out: torch.Tensor | None = None,
                    strategy: str = "auto") -> torch.Tensor:
    """dw (weight_shape, channels-last): the gradient of conv(x, w) with respect to w, given x and dy."""
    geometry = ("bwd_weight", _field_shape(x, "x"), _shape(weight_shape), _shape(stride), _shape(padding),
                _shape(dilation), groups)
    return call.conv(_CONV, "bwd_weight", x, dy, geometry, None, None, out, strategy)[0]


def _field_shape(t: Any, field: str) -> Any:
    """A tensor argument's shape (the checked path names a non-tensor)."""
    shape = getattr(t, "shape", None)
    return shape if shape is not None else field


__all__ = ["conv", "conv_bwd_data", "conv_bwd_weight", "default_conv_registry", "default_registry", "gemm"]
