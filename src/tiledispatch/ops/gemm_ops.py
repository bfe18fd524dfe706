"""torch.ops.tiledispatch.gemm and gemm_scaled: td.gemm as PyTorch custom operators.

gemm: out = activation(a @ b + bias), a (M, K) or (B, M, K), b (K, N) or (B, K, N), bias (N,), out row-major
(M, N) or (B, M, N); differentiable (two gemms and a bias sum; a 2-D operand of a batched product gets its
gradient summed over the batch). gemm_scaled: the fp8 form, out = activation(scale_a * scale_b * a @ b + bias)
with one-element float32 scales and b column-major (K-major), written in out_dtype; not differentiable.
Operands whose last two dims are neither row- nor column-major are copied contiguous first.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

import tiledispatch as td
from tiledispatch.errors import BadInput
from tiledispatch.ops.activation import FROM_OUTPUT, activation_backward, needs_pre_activation
from tiledispatch.ops.registration import define
from tiledispatch.runtime.launcher import fresh_workspaces


def matrix(t: torch.Tensor) -> torch.Tensor:
    """t when td.gemm can read it in place (row- or column-major, a real batch stride), else a copy."""
    rows, cols = t.shape[-2], t.shape[-1]
    # one unit-stride axis, and rows / columns that do not alias
    # (a broadcast (1, N) gradient has strides (0, 0))
    inner = ((t.stride(-1) == 1 and (rows == 1 or t.stride(-2) >= cols))
             or (t.stride(-2) == 1 and (cols == 1 or t.stride(-1) >= rows)))
    batch = t.dim() == 2 or t.shape[0] == 1 or t.stride(0) != 0
    return t if inner and batch else t.contiguous()


def _out_shape(a: torch.Tensor, b: torch.Tensor) -> tuple:
    if a.dim() not in (2, 3) or b.dim() not in (2, 3):
        raise BadInput(f"a {tuple(a.shape)} and b {tuple(b.shape)} must be 2-D or 3-D", field="a")
    if a.shape[-1] != b.shape[-2]:
        raise BadInput(f"b has shape {tuple(b.shape)}: its rows must equal a's columns {a.shape[-1]}",
                       field="b")
    batch = a.shape[:-2] if a.dim() == 3 else b.shape[:-2]
    return (*batch, a.shape[-2], b.shape[-1])


def _gemm_kernel(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                 activation: str) -> torch.Tensor:
    """activation(a @ b + bias), row-major."""
    out = _fake_gemm(a, b, bias, activation)
    with fresh_workspaces():   # the ops run inside CUDA-graph pools (see launcher)
        td.gemm(matrix(a), matrix(b), bias=None if bias is None else bias.contiguous(),
                activation=None if activation == "none" else activation, out=out)
    return out


def _fake_gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, activation: str) -> torch.Tensor:
    return a.new_empty(_out_shape(a, b))


def _setup_gemm(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    a, b, bias, activation = inputs
    ctx.activation = activation
    keep_output = activation in FROM_OUTPUT and activation != "none"
    ctx.save_for_backward(a, b, bias, output if keep_output else None)


def _sum_to(grad: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The gradient of a 2-D operand broadcast over a batch: summed over the batch."""
    return grad.sum(0) if grad.dim() > like.dim() else grad


def _gemm_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    a, b, bias, out = ctx.saved_tensors
    pre = gemm(a, b, bias, "none") if needs_pre_activation(ctx.activation) else None
    grad = activation_backward(ctx.activation, grad, out, pre)
    return (*gemm_grads(a, b, bias, grad, ctx.needs_input_grad), None)


def _column_major(t: torch.Tensor) -> bool:
    """Whether a 2-D tensor is the transpose of a row-major one (and not row-major itself)."""
    return t.stride(0) == 1 and t.stride(1) != 1


def gemm_grads(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, grad: torch.Tensor,
               needs: Sequence[bool]) -> tuple:
    """(da, db, dbias) of out = a @ b + bias through the op (differentiable again), None where `needs` (a, b,
    bias) says no."""
    da = db = dbias = None
    if needs[0]:
        da = _sum_to(gemm(grad, b.mT, None, "none"), a)
    if needs[1]:
        if b.dim() == 2:      # one (K, N) weight for the whole batch: one long-K product
            a2, g2 = a.reshape(-1, a.shape[-1]), grad.reshape(-1, grad.shape[-1])
            # in b's layout: a column-major b (a Linear's weight.T) gets its gradient as (grad^T a)^T, so
            # the weight's gradient comes out row-major like the weight and autograd keeps it as it is
            # (a gradient in another layout than its parameter costs a copy per step)
            db = gemm(g2.mT, a2, None, "none").mT if _column_major(b) else gemm(a2.mT, g2, None, "none")
        else:
            db = gemm(a.mT, grad, None, "none")
    if bias is not None and needs[2]:
        dbias = grad.reshape(-1, grad.shape[-1]).sum(0).to(bias.dtype)
    return da, db, dbias


gemm = define("gemm", "(Tensor a, Tensor b, Tensor? bias, str activation) -> Tensor", _gemm_kernel,
              _fake_gemm, _gemm_backward, _setup_gemm)


def _gemm_scaled_kernel(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                bias: torch.Tensor | None, out_dtype: torch.dtype, activation: str) -> torch.Tensor:
    """activation(scale_a * scale_b * a @ b + bias) in out_dtype, for fp8 a and b."""
    out = _fake_gemm_scaled(a, b, scale_a, scale_b, bias, out_dtype, activation)
    with fresh_workspaces():   # the ops run inside CUDA-graph pools (see launcher)
        td.gemm(matrix(a), matrix(b), bias=None if bias is None else bias.contiguous(),
                activation=None if activation == "none" else activation, out=out, scale_a=scale_a,
                scale_b=scale_b)
    return out


def _fake_gemm_scaled(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                      bias: torch.Tensor | None, out_dtype: torch.dtype, activation: str) -> torch.Tensor:
    return a.new_empty(_out_shape(a, b), dtype=out_dtype)


def _no_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    raise BadInput("tiledispatch::gemm_scaled (fp8) is not differentiable", field="a")


gemm_scaled = define("gemm_scaled", "(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias, "
                     "ScalarType out_dtype, str activation) -> Tensor", _gemm_scaled_kernel,
                     _fake_gemm_scaled, _no_backward, lambda ctx, inputs, output: None)
