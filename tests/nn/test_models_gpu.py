"""GPU lane of the PyTorch integration: opcheck in bf16 on CUDA, a converted model's training step against
fp32, and torch.compile with fullgraph=True and mode="reduce-overhead" (CUDA graphs) against eager."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.library import opcheck

import tiledispatch.nn as tdnn

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
OPS = torch.ops.tiledispatch
BF16_TOL = 1e-2   # relative (norm-wise) error of bf16 results against an fp32 computation


def _model() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1, groups=8, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.Conv2d(32, 64, 1, bias=False),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.detach().float() - want.detach().float()).norm() / want.detach().float().norm())


def _step(model: nn.Module, x: torch.Tensor, grad: torch.Tensor) -> list[torch.Tensor]:
    x = x.to(next(model.parameters()).dtype).requires_grad_()
    y = model(x)
    y.backward(grad.to(y.dtype))
    return [y, x.grad, *(p.grad for p in model.parameters())]


def test_opcheck_bf16_on_cuda():
    cl = torch.channels_last
    x = torch.randn(4, 32, 14, 14, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=cl)
    w = torch.randn(32, 4, 3, 3, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=cl)
    b = torch.randn(32, device="cuda", dtype=torch.bfloat16)
    for t in (x, w, b):
        t.requires_grad_()
    for result in (opcheck(OPS.conv.default, (x, w, b, [1, 1], [1, 1, 1, 1], [1, 1], 8, "relu")),
                   opcheck(OPS.gemm.default, (torch.randn(64, 96, device="cuda", dtype=torch.bfloat16,
                                                          requires_grad=True),
                                              torch.randn(48, 96, device="cuda", dtype=torch.bfloat16,
                                                          requires_grad=True).t(), None, "none"))):
        assert set(result.values()) == {"SUCCESS"}, result


def test_converted_training_step_matches_fp32():
    """bf16 channels-last, as the benchmarks run: output and every gradient as close to fp32 torch as stock
    bf16 torch is (within 1e-2, or 1.25x stock's error where batch norm in bf16 puts stock itself above it:
    an H100 measured ~8e-2 on the input grad and the first conv's weight grad for both)."""
    torch.manual_seed(0)
    stock = _model().cuda()
    bf16 = copy.deepcopy(stock).to(torch.bfloat16, memory_format=torch.channels_last)
    model = copy.deepcopy(bf16)
    report = tdnn.convert(model)
    assert not report.left
    x = torch.randn(8, 16, 32, 32, device="cuda").contiguous(memory_format=torch.channels_last)
    grad = torch.randn(8, 10, device="cuda")
    names = ["output", "input grad", *(n for n, _ in stock.named_parameters())]
    want = _step(stock, x.clone(), grad)
    ours, base = _step(model, x.clone(), grad), _step(bf16, x.clone(), grad)
    assert len(ours) == len(base) == len(want) == len(names)
    for name, got, stock_bf16, exact in zip(names, ours, base, want):
        assert _rel(got, exact) <= max(BF16_TOL, 1.25 * _rel(stock_bf16, exact)), name


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_compiled_training_step_matches_eager(mode):
    """fullgraph=True (no graph break); reduce-overhead replays the step as CUDA graphs after warm-up."""
    torch.manual_seed(1)
    eager = _model().cuda().to(torch.bfloat16, memory_format=torch.channels_last)
    tdnn.convert(eager)
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, fullgraph=True, mode=mode)
    x = torch.randn(8, 16, 32, 32, device="cuda").contiguous(memory_format=torch.channels_last)
    grad = torch.randn(8, 10, device="cuda")
    want = _step(eager, x, grad)
    for _ in range(3):   # warm-up, recording, replay
        model.zero_grad(set_to_none=True)
        got = _step(compiled, x, grad)
    for got_t, want_t in zip(got, want):
        assert _rel(got_t, want_t) < BF16_TOL
