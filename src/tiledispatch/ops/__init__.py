"""PyTorch custom operators over td.conv* and td.gemm (namespace `tiledispatch`); importing this registers
them.

    torch.ops.tiledispatch.conv / conv_bwd_data / conv_bwd_weight / gemm / gemm_scaled

Each has a fake kernel (torch.compile traces it with exact shapes and strides) and, except gemm_scaled,
autograd. The functions here take torch-style arguments (ints or per-dim tuples, padding pairs, 'same' /
'valid') and call the ops with their normalized form. CUDA tensors run compiled kernels; CPU tensors run
Triton's interpreter (slow: for tests and tiny problems).
"""
from __future__ import annotations

from typing import Any

import torch

from tiledispatch.errors import BadInput
from tiledispatch.ops import conv_ops as _conv_ops
from tiledispatch.ops import gemm_ops as _gemm_ops
from tiledispatch.ops.activation import check_activation
from tiledispatch.ops.layout import padding_pairs, per_dim, same_padding

OPS = ("conv", "conv_bwd_data", "conv_bwd_weight", "gemm", "gemm_scaled")
DTYPES = (torch.float16, torch.bfloat16, torch.float32)   # what td.conv* and td.gemm take (fp8: gemm_scaled)


def conv_padding(padding: Any, kernel: tuple[int, ...], stride: list[int], dilation: list[int]) -> list[int]:
    """Any torch / td padding argument as the ops' flat [left0, right0, ...] list ('same' needs stride 1)."""
    ndim = len(kernel)
    if padding == "valid":
        return [0] * (2 * ndim)
    if padding == "same":
        if any(s != 1 for s in stride):
            raise BadInput(f"padding='same' needs stride 1, got stride={stride}", field="padding")
        return same_padding(kernel, dilation)
    return padding_pairs(padding, ndim)


def conv(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, stride: Any = 1,
         padding: Any = 0, dilation: Any = 1, groups: int = 1, activation: str | None = None) -> torch.Tensor:
    """activation(conv(x, w) + bias) through torch.ops.tiledispatch.conv; x (N, C, *spatial) in any layout,
    the result channels-last. padding: an int, one per dim, (left, right) per dim, 'same' or 'valid'."""
    ndim = x.dim() - 2
    stride_, dilation_ = per_dim("stride", stride, ndim), per_dim("dilation", dilation, ndim)
    pads = conv_padding(padding, tuple(w.shape[2:]), stride_, dilation_)
    return _conv_ops.conv(x, w, bias, stride_, pads, dilation_, groups,
                          check_activation(activation or "none"))


def conv_bwd_data(dy: torch.Tensor, w: torch.Tensor, input_shape: Any, stride: Any = 1, padding: Any = 0,
                  dilation: Any = 1, groups: int = 1) -> torch.Tensor:
    """dx of conv(x, w) given dy, through torch.ops.tiledispatch.conv_bwd_data (channels-last)."""
    ndim = dy.dim() - 2
    stride_, dilation_ = per_dim("stride", stride, ndim), per_dim("dilation", dilation, ndim)
    pads = conv_padding(padding, tuple(w.shape[2:]), stride_, dilation_)
    return _conv_ops.conv_bwd_data(dy, w, list(input_shape), stride_, pads, dilation_, groups)


def conv_bwd_weight(x: torch.Tensor, dy: torch.Tensor, weight_shape: Any, stride: Any = 1, padding: Any = 0,
                    dilation: Any = 1, groups: int = 1) -> torch.Tensor:
    """dw of conv(x, w) given x and dy, through torch.ops.tiledispatch.conv_bwd_weight (channels-last)."""
    ndim = x.dim() - 2
    stride_, dilation_ = per_dim("stride", stride, ndim), per_dim("dilation", dilation, ndim)
    pads = conv_padding(padding, tuple(weight_shape[2:]), stride_, dilation_)
    return _conv_ops.conv_bwd_weight(x, dy, list(weight_shape), stride_, pads, dilation_, groups)


def gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
         activation: str | None = None) -> torch.Tensor:
    """activation(a @ b + bias) through torch.ops.tiledispatch.gemm (row-major result)."""
    return _gemm_ops.gemm(a, b, bias, check_activation(activation or "none"))


def gemm_scaled(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16,
                activation: str | None = None) -> torch.Tensor:
    """activation(scale_a * scale_b * a @ b + bias) for fp8 a, b (torch.ops.tiledispatch.gemm_scaled)."""
    return _gemm_ops.gemm_scaled(a, b, scale_a, scale_b, bias, out_dtype,
                                 check_activation(activation or "none"))


__all__ = ["DTYPES", "OPS", "conv", "conv_bwd_data", "conv_bwd_weight", "conv_padding", "gemm", "gemm_scaled"]
