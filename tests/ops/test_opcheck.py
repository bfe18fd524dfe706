"""torch.library.opcheck for every tiledispatch op on the CPU lane (Triton's interpreter): schema, autograd
registration, fake kernel against the real one (shapes and strides), and AOT dispatch with dynamic shapes,
which also runs each op's backward. fp32 and fp16 only: the Triton 3.6 interpreter computes bf16 dots wrongly.

The ops run on small default registries (tests/conftest.py `small_defaults`: one small kernel per direction,
dtype, ndim and epilogue) instead of the essential presets, whose builds were most of this file's time; what
the ops compute and how torch sees them does not depend on which kernel serves them.
"""
from __future__ import annotations

import pytest
import torch
from torch.library import opcheck

import tiledispatch.ops  # noqa: F401  (registers the ops)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("small_defaults")]
OPS = torch.ops.tiledispatch
CL = torch.channels_last


def _check(op, args):
    result = opcheck(op, args)
    assert set(result.values()) == {"SUCCESS"}, result


def _grad(*shape, dtype=torch.float32, memory_format=CL):
    return torch.randn(*shape, dtype=dtype).contiguous(memory_format=memory_format).requires_grad_()


def test_conv_fp32_bias_gelu_grouped_stride_2_asymmetric_padding():
    """gelu differentiates from its input: the backward recomputes the pre-activation (one more forward)."""
    x, w, b = _grad(2, 6, 7, 5), _grad(4, 3, 3, 2), torch.randn(4, requires_grad=True)
    _check(OPS.conv.default, (x, w, b, [2, 1], [1, 0, 0, 1], [1, 1], 2, "gelu"))


def test_conv_fp32_depthwise_dilated_from_nchw_inputs():
    """NCHW (contiguous) inputs are copied channels-last inside the op; the result is channels-last."""
    x = torch.randn(1, 4, 6, 7).requires_grad_()
    w = torch.randn(4, 1, 3, 3).requires_grad_()
    _check(OPS.conv.default, (x, w, None, [1, 1], [2, 2, 2, 2], [2, 2], 4, "none"))


def test_conv_fp32_bias_relu():
    """relu differentiates from the op's output (saved), no recompute."""
    x, w, b = _grad(2, 4, 5, 5), _grad(6, 4, 1, 1), torch.randn(6, requires_grad=True)
    _check(OPS.conv.default, (x, w, b, [1, 1], [0, 0, 0, 0], [1, 1], 1, "relu"))


def test_conv_fp32_1d_with_bias():
    """1-D: the channels-last form is an (N, L, C) tensor transposed to (N, C, L), for dw too."""
    x = torch.randn(2, 13, 6).transpose(1, 2).requires_grad_()
    w = torch.randn(6, 1, 5).transpose(1, 2).contiguous().transpose(1, 2).requires_grad_()
    _check(OPS.conv.default, (x, w, torch.randn(6, requires_grad=True), [2], [2, 2], [1], 6, "none"))


def test_conv_fp32_3d():
    cl3 = torch.channels_last_3d
    x, w = _grad(1, 4, 3, 6, 5, memory_format=cl3), _grad(4, 2, 1, 3, 3, memory_format=cl3)
    _check(OPS.conv.default, (x, w, None, [1, 2, 1], [0, 0, 1, 1, 1, 1], [1, 1, 1], 2, "none"))


def test_conv_fp16_forward():
    x = torch.randn(2, 8, 5, 6, dtype=torch.float16).contiguous(memory_format=CL)
    w = torch.randn(8, 4, 3, 3, dtype=torch.float16).contiguous(memory_format=CL)
    _check(OPS.conv.default, (x, w, None, [1, 1], [1, 1, 1, 1], [1, 1], 2, "none"))


def test_conv_bwd_data_fp32_with_double_backward():
    dy, w = _grad(2, 4, 3, 4), _grad(4, 3, 3, 3)
    _check(OPS.conv_bwd_data.default, (dy, w, [2, 6, 6, 7], [2, 2], [1, 1, 1, 1], [1, 1], 2))


def test_conv_bwd_weight_fp32_with_double_backward():
    x, dy = _grad(2, 6, 6, 7), _grad(2, 4, 3, 4)
    _check(OPS.conv_bwd_weight.default, (x, dy, [4, 3, 3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 2))


def test_gemm_fp32_linear_form_with_bias():
    """x @ weight.T + bias as tiledispatch.nn.Linear calls it (weight.T: a column-major view)."""
    a = torch.randn(5, 7, requires_grad=True)
    weight = torch.randn(3, 7, requires_grad=True)
    _check(OPS.gemm.default, (a, weight.t(), torch.randn(3, requires_grad=True), "none"))


def test_gemm_fp32_batched_a_with_one_weight():
    """A 2-D operand of a batched product: its gradient is one long-K product over the whole batch."""
    a = torch.randn(2, 5, 7, requires_grad=True)
    weight = torch.randn(3, 7, requires_grad=True)
    _check(OPS.gemm.default, (a, weight.t(), torch.randn(3, requires_grad=True), "none"))


def test_gemm_fp16_forward():
    a, b = torch.randn(6, 16, dtype=torch.float16), torch.randn(8, 16, dtype=torch.float16).t()
    _check(OPS.gemm.default, (a, b, None, "none"))


def test_gemm_scaled_fp8():
    """test_schema is left out: it compares inputs before and after with torch.allclose, which torch has no
    CPU kernel for in float8_e4m3fn; the numbers are checked against a float32 product instead."""
    a = torch.randn(5, 32).to(torch.float8_e4m3fn)
    b = torch.randn(16, 32).to(torch.float8_e4m3fn).t()          # K-major B (layout rcr)
    args = (a, b, torch.tensor([0.5]), torch.tensor([2.0]), None, torch.bfloat16, "none")
    utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    result = opcheck(OPS.gemm_scaled.default, args, test_utils=utils)
    assert set(result.values()) == {"SUCCESS"}, result
    out = OPS.gemm_scaled.default(*args)
    ref = a.float() @ b.float()
    assert out.dtype == torch.bfloat16 and float((out.float() - ref).norm() / ref.norm()) < 1e-2
