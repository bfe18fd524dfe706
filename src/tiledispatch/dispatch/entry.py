"""td.gemm and td.conv*: the one-call API over the default registries (defaults.GEMM / CONV).

Each function is its op's hot path: a repeated argument signature whose decision is still valid (same stamp,
plain scalars, no `out` overlapping an input) goes straight to the bound launch; anything else takes the
first-call path of dispatch/call.py, which checks, selects, binds and remembers.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tiledispatch.dispatch import call
from tiledispatch.dispatch.call import REAL
from tiledispatch.dispatch.defaults import CONV, GEMM

if TYPE_CHECKING:
    import torch

    from tiledispatch.select.selector import Selection

_GEMM_GET = GEMM.memo.get
_gemm_key = call.gemm_key
_CONV_GET = CONV.memo.get


def gemm(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None, d: tuple = (),
         activation: str | None = None, alpha: float = 1.0, beta: float = 0.0,
         out: torch.Tensor | None = None, out_dtype: str | None = None, c: torch.Tensor | None = None,
         bias_mode: str | None = None, allow_tf32: bool = False, strategy: str = "auto",
         scale_a: torch.Tensor | None = None, scale_b: torch.Tensor | None = None) -> torch.Tensor:
    """out = activation(alpha * a @ b + beta * c + bias + sum(d)), computed by the selected kernel.

    a: (M, K) or (batch, M, K); b: (K, N) or (batch, K, N), row- or column-major. bias has N values
    (per column, the default) or M values with bias_mode="row". With beta != 0 and no `c`, `out` is read
    as C (BLAS semantics). scale_a / scale_b: one-element float32 tensors scaling fp8 operands. CUDA tensors
    run compiled kernels (or the vendor library where `auto` measured it faster); CPU tensors run on Triton's
    interpreter. The first call of an argument signature validates, selects and binds; later calls of the same
    signature reuse that decision.
    """
    if beta != 0 and c is None:
        c = out   # BLAS semantics: out = alpha * A @ B + beta * out
    key = _gemm_key(a, b, out, c, bias, d, beta, scale_a, scale_b, bias_mode, activation, out_dtype,
                    allow_tf32, strategy)
    hit = _GEMM_GET(key)
    if (hit is not None and hit.stamp == hit.registry.stamp() and type(alpha) in REAL and type(beta) in REAL
            and (out is None or not call.meets(hit, out, a, b))):
        return hit.bound(a, b, out, c, bias, d, alpha, beta, scale_a, scale_b)
    args = call.gemm_args(a, b, out, c, bias, bias_mode, d, activation, alpha, beta, out_dtype, allow_tf32,
                          scale_a, scale_b)
    return call.first_gemm(GEMM, key, args, strategy, None)[0]


def conv(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, stride: Any = 1,
         padding: Any = 0, dilation: Any = 1, groups: int = 1, *, activation: str | None = None,
         out: torch.Tensor | None = None, strategy: str = "auto") -> torch.Tensor:
    """y = activation(conv(x, w) + bias): x (N, C, *spatial) and w (K, C/groups, *filter) channels-last
    (torch.channels_last / channels_last_3d; for 1-D a (N, L, C) tensor transposed to (N, C, L)); padding is
    an int, one per dim, or a (left, right) pair per dim. Returns y (N, K, *out) channels-last. The first call
    of an argument signature (as td.conv_bwd_data / td.conv_bwd_weight) checks, selects and binds; later calls
    of the same signature reuse that decision."""
    shape = _geometry("fwd", getattr(x, "shape", "x"), getattr(w, "shape", "w"), stride, padding, dilation,
                      groups)
    key = call.conv_key(x, w, shape, bias, activation, out, strategy)
    hit = _CONV_GET(key)
    if (hit is not None and hit.stamp == hit.registry.stamp()
            and (out is None or not call.meets(hit, out, x, w))):
        return hit.bound(x, w, out, bias)
    return call.first_conv(CONV, key, "fwd", x, w, shape, bias, activation, out, strategy)[0]


def conv_bwd_data(dy: torch.Tensor, w: torch.Tensor, input_shape: Any, stride: Any = 1, padding: Any = 0,
                  dilation: Any = 1, groups: int = 1, *, out: torch.Tensor | None = None,
                  strategy: str = "auto") -> torch.Tensor:
    """dx (input_shape, channels-last): the gradient of conv(x, w) with respect to x, given dy."""
    shape = _geometry("bwd_data", input_shape, getattr(w, "shape", "w"), stride, padding, dilation, groups)
    key = call.conv_key(dy, w, shape, None, None, out, strategy)
    hit = _CONV_GET(key)
    if (hit is not None and hit.stamp == hit.registry.stamp()
            and (out is None or not call.meets(hit, out, dy, w))):
        return hit.bound(out, w, dy, None)
    return call.first_conv(CONV, key, "bwd_data", dy, w, shape, None, None, out, strategy)[0]


def conv_bwd_weight(x: torch.Tensor, dy: torch.Tensor, weight_shape: Any, stride: Any = 1, padding: Any = 0,
                    dilation: Any = 1, groups: int = 1, *, out: torch.Tensor | None = None,
                    strategy: str = "auto") -> torch.Tensor:
    """dw (weight_shape, channels-last): the gradient of conv(x, w) with respect to w, given x and dy."""
    shape = _geometry("bwd_weight", getattr(x, "shape", "x"), weight_shape, stride, padding, dilation, groups)
    key = call.conv_key(x, dy, shape, None, None, out, strategy)
    hit = _CONV_GET(key)
    if (hit is not None and hit.stamp == hit.registry.stamp()
            and (out is None or not call.meets(hit, out, x, dy))):
        return hit.bound(x, out, dy, None)
    return call.first_conv(CONV, key, "bwd_weight", x, dy, shape, None, None, out, strategy)[0]


def _geometry(direction: str, x_shape: Any, w_shape: Any, stride: Any, padding: Any, dilation: Any,
              groups: Any) -> tuple:
    """A call's call.Geometry; list arguments become tuples (hashable keys)."""
    if type(stride) is list or type(padding) is list or type(dilation) is list or type(x_shape) is list \
            or type(w_shape) is list:
        stride, padding, dilation, x_shape, w_shape = map(_frozen,
                                                          (stride, padding, dilation, x_shape, w_shape))
    return (direction, x_shape, w_shape, stride, padding, dilation, groups)


def _frozen(value: Any) -> Any:
    return tuple(_frozen(v) for v in value) if type(value) is list else value


def conv_plan(direction: str, first: torch.Tensor, second: torch.Tensor, shape: Any, stride: Any = 1,
              padding: Any = 0, dilation: Any = 1, groups: int = 1, *, bias: torch.Tensor | None = None,
              strategy: str = "auto") -> Selection | None:
    """The selection the remembered decision of these td.conv* arguments runs (`out` not given), or None
    when no valid decision is remembered; shape: w's (fwd), input_shape (bwd_data) or weight_shape
    (bwd_weight) as the call took it."""
    x_shape, w_shape = {"fwd": (first.shape, shape), "bwd_data": (shape, second.shape),
                        "bwd_weight": (first.shape, shape)}[direction]
    geometry = _geometry(direction, x_shape, w_shape, stride, padding, dilation, groups)
    hit = _CONV_GET(call.conv_key(first, second, geometry, bias, None, None, strategy))
    if hit is None or hit.stamp != hit.registry.stamp():
        return None
    return hit.selection


def gemm_plan(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None,
              strategy: str = "auto") -> Selection | None:
    """The selection the remembered decision of td.gemm(a, b, bias=bias) runs (no other argument given), or
    None when no valid decision is remembered."""
    hit = _GEMM_GET(_gemm_key(a, b, None, None, bias, (), 0.0, None, None, None, None, None, False, strategy))
    if hit is None or hit.stamp != hit.registry.stamp():
        return None
    return hit.selection
