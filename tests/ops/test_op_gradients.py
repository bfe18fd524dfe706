"""Gradients through the custom ops against torch in float64, on small odd shapes (CPU lane, fp32 kernels on
Triton's interpreter): conv 1-D / 2-D / 3-D with grouped, depthwise, strided, dilated and asymmetric
geometry, bias and a fused activation; double backward; gemm in the forms the modules use."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tiledispatch import ops

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("small_defaults")]   # small default registries
TOL = 2e-5    # relative (norm-wise) error of fp32 results against float64


def _rel(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.detach().double() - ref.detach()).norm() / ref.detach().norm().clamp_min(1e-30))


def _leaves(*tensors):
    ours = [t.clone().requires_grad_() if t is not None else None for t in tensors]
    refs = [t.double().requires_grad_() if t is not None else None for t in tensors]
    return ours, refs


def _grads(out, inputs, seed):
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    present = [t for t in inputs if t is not None]
    return torch.autograd.grad(out, present, grad.to(out.dtype))


# Why each case: 1-D depthwise with stride and padding (Conv1d's transposed NLC layout); 2-D grouped with
# stride 2 on an odd size (rows of dx that no output reads); 2-D dense with dilation and bias; 3-D grouped
# with per-dim strides (video-style (2+1)D factorisation: a 1x3x3 then a 3x1x1).
CASES = [
    ((2, 6, 13), (6, 1, 5), {"stride": 2, "padding": 2, "groups": 6}, True),
    ((2, 8, 7, 9), (6, 4, 3, 3), {"stride": 2, "padding": 1, "groups": 2}, False),
    ((1, 3, 8, 7), (5, 3, 3, 2), {"padding": (2, 1), "dilation": 2}, True),
    ((1, 4, 3, 6, 5), (4, 2, 1, 3, 3), {"stride": (1, 2, 1), "padding": (0, 1, 1), "groups": 2}, False),
    ((1, 4, 5, 4, 3), (6, 4, 3, 1, 1), {"padding": (1, 0, 0)}, False),
]


@pytest.mark.parametrize("x_shape, w_shape, geometry, with_bias", CASES)
def test_conv_gradients_match_torch_in_float64(x_shape, w_shape, geometry, with_bias):
    conv = (F.conv1d, F.conv2d, F.conv3d)[len(x_shape) - 3]
    bias = torch.randn(w_shape[0]) if with_bias else None
    (x, w, b), (rx, rw, rb) = _leaves(torch.randn(x_shape), torch.randn(w_shape), bias)
    y = ops.conv(x, w, b, **geometry)
    ref = conv(rx, rw, rb, **geometry)
    assert _rel(y, ref) < TOL
    got = _grads(y, (x, w, b), seed=1)
    want = _grads(ref, (rx, rw, rb), seed=1)
    for name, g, r in zip(("dx", "dw", "dbias"), got, want):
        assert g.shape == r.shape and _rel(g, r) < TOL, name


def test_conv_with_fused_gelu_and_bias_differentiates_like_torch():
    (x, w, b), (rx, rw, rb) = _leaves(torch.randn(2, 4, 5, 6), torch.randn(6, 2, 3, 3), torch.randn(6))
    y = ops.conv(x, w, b, padding=1, groups=2, activation="gelu")
    ref = F.gelu(F.conv2d(rx, rw, rb, padding=1, groups=2))
    assert _rel(y, ref) < TOL
    for g, r in zip(_grads(y, (x, w, b), 2), _grads(ref, (rx, rw, rb), 2)):
        assert _rel(g, r) < TOL


def test_double_backward_matches_torch():
    """A gradient penalty: d/dw of |d loss / dx|^2 runs the backward ops' own backward."""
    (x, w), (rx, rw) = _leaves(torch.randn(2, 4, 6, 5), torch.randn(4, 2, 3, 3))

    def penalty(conv, x, w):
        y = conv(x, w, None, 1, 1, 1, 2)
        (dx,) = torch.autograd.grad(y.square().sum(), x, create_graph=True)
        return torch.autograd.grad(dx.square().sum(), w)[0]

    assert _rel(penalty(ops.conv, x, w), penalty(F.conv2d, rx, rw)) < TOL


@pytest.mark.parametrize("a_shape", [(5, 7), (2, 3, 7)])
def test_gemm_gradients_in_the_linear_form(a_shape):
    """x @ weight.T + bias, with a 2-D x and with a batched x sharing one weight (its gradient summed)."""
    (a, weight, bias), (ra, rweight, rbias) = _leaves(torch.randn(a_shape), torch.randn(4, 7), torch.randn(4))
    y = ops.gemm(a, weight.t(), bias)
    ref = ra @ rweight.t() + rbias
    assert y.shape == ref.shape and _rel(y, ref) < TOL
    grads = _grads(y, (a, weight, bias), 3)
    for name, g, r in zip(("da", "dweight", "dbias"), grads, _grads(ref, (ra, rweight, rbias), 3)):
        assert g.shape == r.shape and _rel(g, r) < TOL, name
    # in the weight's own layout: AccumulateGrad copied a transposed gradient into it on every step (one
    # copy per Linear per step, e.g. EfficientNet-B0's classifier under torch.compile, stop 49)
    assert grads[1].stride() == weight.stride()


def test_gemm_gradient_of_a_row_major_b_stays_row_major():
    (a, b), _ = _leaves(torch.randn(5, 7), torch.randn(7, 4))
    grad = torch.randn(5, 4)
    (db,) = torch.autograd.grad(ops.gemm(a, b, None), (b,), grad)
    assert db.stride() == b.stride()
    assert _rel(db, a.detach().double().t() @ grad.double()) < TOL
