"""torch.ops.tiledispatch.conv / conv_bwd_data / conv_bwd_weight: td.conv* as PyTorch custom operators.

Each op has a fake kernel (exact output shape and channels-last strides, so torch.compile traces it without
running it) and autograd: conv differentiates through the two backward ops (and a bias sum), and each
backward op through the other two (conv* are bilinear), so double backward works too. The kernels take any
input layout (copied to channels-last first) and return the output td.conv* allocated, which has the
channels-last strides the fake kernels promise (copied only when a vendor result differs in a size-1 dim;
writing into a tensor allocated here cost the vendor plans a device copy per call). Geometry arrives
normalized: one stride / dilation per spatial dim and padding as [left0, right0, left1, right1, ...].
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

import tiledispatch as td
from tiledispatch.errors import BadInput
from tiledispatch.ops.activation import FROM_OUTPUT, activation_backward, needs_pre_activation
from tiledispatch.ops.layout import as_channels_last, conv_output_size, empty_channels_last, pairs
from tiledispatch.ops.registration import define
from tiledispatch.runtime.launcher import fresh_workspaces

_GEOMETRY = "int[] stride, int[] padding, int[] dilation, int groups"
_Ints = Sequence[int]


def _output_shape(x_shape: _Ints, w_shape: _Ints, stride: _Ints, padding: _Ints, dilation: _Ints,
                  groups: int) -> tuple:
    """The forward output's shape (N, K, *out), after the checks a fake kernel can make without data
    (td.conv* make them all again when they run)."""
    ndim = len(x_shape) - 2
    if ndim not in (1, 2, 3) or len(w_shape) != len(x_shape):
        raise BadInput(f"input has shape {tuple(x_shape)} and weight {tuple(w_shape)}; both need 3, 4 or 5 "
                       "dims (N, C, *spatial)", field="input")
    if len(stride) != ndim or len(dilation) != ndim or len(padding) != 2 * ndim:
        raise BadInput(f"stride {list(stride)}, dilation {list(dilation)}, padding {list(padding)}: need "
                       f"{ndim}, {ndim} and {2 * ndim} values for {ndim}-D", field="stride")
    if groups < 1 or w_shape[1] * groups != x_shape[1] or w_shape[0] % groups:
        raise BadInput(f"weight {tuple(w_shape)} with groups={groups} does not match input channels "
                       f"{x_shape[1]}", field="groups")
    out = conv_output_size(x_shape[2:], w_shape[2:], stride, padding, dilation)
    if any(size <= 0 for size in out):
        raise BadInput(f"input {tuple(x_shape)} is smaller than the dilated filter {tuple(w_shape[2:])} with "
                       f"padding {list(padding)}: output size {out}", field="spatial")
    return (x_shape[0], w_shape[0], *out)


def _check_dy(dy: torch.Tensor, shape: tuple) -> None:
    if tuple(dy.shape) != shape:
        raise BadInput(f"dy has shape {tuple(dy.shape)}; the forward output has {shape}", field="dy")


# -- forward -----------------------------------------------------------------------------------------------
def _conv_kernel(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: _Ints, padding: _Ints,
                 dilation: _Ints, groups: int, activation: str) -> torch.Tensor:
    """y = activation(conv(x, w) + bias), channels-last."""
    with fresh_workspaces():   # the ops run inside CUDA-graph pools (see launcher)
        y = td.conv(as_channels_last(x), as_channels_last(w), None if bias is None else bias.contiguous(),
                    tuple(stride), pairs(padding), tuple(dilation), groups,
                    activation=None if activation == "none" else activation)
    return as_channels_last(y)


def _fake_conv(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: _Ints, padding: _Ints,
               dilation: _Ints, groups: int, activation: str) -> torch.Tensor:
    shape = _output_shape(x.shape, w.shape, stride, padding, dilation, groups)
    if bias is not None and tuple(bias.shape) != shape[1:2]:
        raise BadInput(f"bias has shape {tuple(bias.shape)}; expected ({shape[1]},)", field="bias")
    return empty_channels_last(shape, x.dtype, x.device)


def _setup_conv(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    x, w, bias, stride, padding, dilation, groups, activation = inputs
    ctx.geometry = (stride, padding, dilation, groups)
    ctx.activation = activation
    keep_output = activation in FROM_OUTPUT and activation != "none"
    ctx.save_for_backward(x, w, bias, output if keep_output else None)


def _conv_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    x, w, bias, y = ctx.saved_tensors
    geometry = ctx.geometry
    pre = conv(x, w, bias, *geometry, "none") if needs_pre_activation(ctx.activation) else None
    grad = activation_backward(ctx.activation, grad, y, pre)
    return (*conv_grads(x, w, bias, grad, geometry, ctx.needs_input_grad), None, None, None, None, None)


def conv_grads(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, grad: torch.Tensor,
               geometry: tuple, needs: Sequence[bool]) -> tuple:
    """(dx, dw, dbias) of y = conv(x, w) + bias through the ops (differentiable again), None where `needs`
    (x, w, bias) says no; geometry as the ops take it (stride, flat padding, dilation, groups)."""
    dx = conv_bwd_data(grad, w, list(x.shape), *geometry) if needs[0] else None
    dw = conv_bwd_weight(x, grad, list(w.shape), *geometry) if needs[1] else None
    db = None
    if bias is not None and needs[2]:
        db = grad.sum(dim=[0, *range(2, grad.dim())]).to(bias.dtype)
    return dx, dw, db


conv = define("conv", f"(Tensor x, Tensor w, Tensor? bias, {_GEOMETRY}, str activation) -> Tensor",
              _conv_kernel, _fake_conv, _conv_backward, _setup_conv)


# -- gradient with respect to the input ----------------------------------------------------------------
def _bwd_data_kernel(dy: torch.Tensor, w: torch.Tensor, input_shape: _Ints, stride: _Ints, padding: _Ints,
                     dilation: _Ints, groups: int) -> torch.Tensor:
    """dx (input_shape, channels-last) of y = conv(x, w), given dy."""
    with fresh_workspaces():   # the ops run inside CUDA-graph pools (see launcher)
        dx = td.conv_bwd_data(as_channels_last(dy), as_channels_last(w), tuple(input_shape), tuple(stride),
                              pairs(padding), tuple(dilation), groups)
    return as_channels_last(dx)


def _fake_bwd_data(dy: torch.Tensor, w: torch.Tensor, input_shape: _Ints, stride: _Ints, padding: _Ints,
                   dilation: _Ints, groups: int) -> torch.Tensor:
    _check_dy(dy, _output_shape(input_shape, w.shape, stride, padding, dilation, groups))
    return empty_channels_last(input_shape, dy.dtype, dy.device)


def _setup_bwd_data(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    dy, w, _input_shape, stride, padding, dilation, groups = inputs
    ctx.geometry = (stride, padding, dilation, groups)
    ctx.save_for_backward(dy, w)


def _bwd_data_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    dy, w = ctx.saved_tensors
    g_dy = conv(grad, w, None, *ctx.geometry, "none") if ctx.needs_input_grad[0] else None
    g_w = conv_bwd_weight(grad, dy, list(w.shape), *ctx.geometry) if ctx.needs_input_grad[1] else None
    return g_dy, g_w, None, None, None, None, None


conv_bwd_data = define("conv_bwd_data", f"(Tensor dy, Tensor w, SymInt[] input_shape, {_GEOMETRY}) -> Tensor",
                       _bwd_data_kernel, _fake_bwd_data, _bwd_data_backward, _setup_bwd_data)


# -- gradient with respect to the weight ---------------------------------------------------------------
def _bwd_weight_kernel(x: torch.Tensor, dy: torch.Tensor, weight_shape: _Ints, stride: _Ints, padding: _Ints,
                       dilation: _Ints, groups: int) -> torch.Tensor:
    """dw (weight_shape, channels-last) of y = conv(x, w), given x and dy."""
    with fresh_workspaces():   # the ops run inside CUDA-graph pools (see launcher)
        dw = td.conv_bwd_weight(as_channels_last(x), as_channels_last(dy), tuple(weight_shape), tuple(stride),
                                pairs(padding), tuple(dilation), groups)
    return as_channels_last(dw)


def _fake_bwd_weight(x: torch.Tensor, dy: torch.Tensor, weight_shape: _Ints, stride: _Ints, padding: _Ints,
                     dilation: _Ints, groups: int) -> torch.Tensor:
    _check_dy(dy, _output_shape(x.shape, weight_shape, stride, padding, dilation, groups))
    return empty_channels_last(weight_shape, dy.dtype, dy.device)


def _setup_bwd_weight(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    x, dy, _weight_shape, stride, padding, dilation, groups = inputs
    ctx.geometry = (stride, padding, dilation, groups)
    ctx.save_for_backward(x, dy)


def _bwd_weight_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    x, dy = ctx.saved_tensors
    g_x = conv_bwd_data(dy, grad, list(x.shape), *ctx.geometry) if ctx.needs_input_grad[0] else None
    g_dy = conv(x, grad, None, *ctx.geometry, "none") if ctx.needs_input_grad[1] else None
    return g_x, g_dy, None, None, None, None, None


conv_bwd_weight = define("conv_bwd_weight",
                         f"(Tensor x, Tensor dy, SymInt[] weight_shape, {_GEOMETRY}) -> Tensor",
                         _bwd_weight_kernel, _fake_bwd_weight, _bwd_weight_backward, _setup_bwd_weight)
