"""D1: the stride of a dim of size 1 never matters. torch gives a channels-last 1x1 weight (K, C, 1, 1) the
strides (C, 1, 1, 1), and a squeeze-excitation activation (N, C, 1, 1) the strides (C, 1, 1, 1); kernels that
read pixel or row strides from the tensor refused them (im2col: 'weight has strides ...', the 1x1 GEMM:
'input has strides ...'). conv_args.check_args gives such dims their dense channels-last strides (a view),
so every kernel runs them."""
from __future__ import annotations

import pytest
import torch

import tiledispatch as td
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.runtime.conv_args import ConvArgs, canonical, check_args

F16 = torch.float16


def cl(t):
    return t.contiguous(memory_format=torch.channels_last)


IM2COL = ConvConfig(family="gemm", direction="fwd", ndim=2, dtype="fp16", block_m=16, block_n=32, block_k=16,
                    num_warps=4, num_stages=2, split_k=1, kloop="im2col", align=8)
GEMM_1X1 = {d: ConvConfig(family="gemm", direction=d, ndim=2, dtype="fp16", block_m=64, block_n=64,
                          block_k=32, num_stages=3, align=8) for d in ("fwd", "bwd_data")}


@pytest.fixture(scope="module")
def registry(build_registry):
    return build_registry([IM2COL, *GEMM_1X1.values()])


def test_canonical_strides_of_size_one_dims():
    w = cl(torch.randn(32, 16, 1, 1, dtype=F16))
    assert w.stride() == (16, 1, 1, 1)                       # torch's channels-last strides of a 1x1 weight
    assert canonical(w).stride() == (16, 1, 16, 16)
    se = cl(torch.randn(4, 24, 1, 1, dtype=F16))
    assert canonical(se).stride() == (24, 1, 24, 24) and canonical(se).data_ptr() == se.data_ptr()
    odd = torch.randn(64, dtype=F16).as_strided((1, 8, 1, 5), (7, 1, 3, 8))   # any strides on size-1 dims
    assert canonical(odd).stride() == (40, 1, 40, 8)
    x = cl(torch.randn(2, 8, 5, 7, dtype=F16))
    assert canonical(x) is x                                 # nothing to change: the same tensor


def test_check_args_replaces_size_one_strides():
    problem = td.ConvProblem("fwd", 4, 24, 16, 1, (1, 1), (1, 1), dtype="fp16")
    args = ConvArgs(cl(torch.randn(4, 24, 1, 1, dtype=F16)), cl(torch.randn(16, 24, 1, 1, dtype=F16)))
    check_args(problem, args)
    assert args.x.stride() == (24, 1, 24, 24) and args.w.stride() == (24, 1, 24, 24)


def _check(kernel, problem, x=None, w=None, y=None):
    """Run a 2-D fwd (x, w given) or bwd_data (w, dy = y given) kernel; compare with torch in float32."""
    out = kernel.run(problem, x=x, w=w, y=y)
    if problem.direction == "fwd":
        want = torch.nn.functional.conv2d(x.float(), w.float(), stride=problem.stride)
    else:
        want = torch.nn.grad.conv2d_input(out.shape, w.float(), y.float(), stride=problem.stride)
    torch.testing.assert_close(out.float(), want, atol=2e-2, rtol=2e-2)
    return out


def test_strided_one_by_one_with_a_channels_last_weight(registry):
    """The issue's case, small: cl(x) and cl(w) of a 1x1 weight at stride 2 through the im2col GEMM."""
    problem = td.ConvProblem("fwd", 2, 16, 32, 1, (7, 7), (1, 1), stride=2, dtype="fp16")
    x, w = cl(torch.randn(2, 16, 7, 7, dtype=F16)), cl(torch.randn(32, 16, 1, 1, dtype=F16))
    assert w.stride() == (16, 1, 1, 1)
    _check(registry.get(IM2COL.name), problem, x=x, w=w)


def test_squeeze_excitation_shapes(registry):
    """(N, C, 1, 1) activations with strides (C, 1, 1, 1), as input and as a given output."""
    problem = td.ConvProblem("fwd", 4, 32, 16, 1, (1, 1), (1, 1), dtype="fp16")
    x, w = cl(torch.randn(4, 32, 1, 1, dtype=F16)), cl(torch.randn(16, 32, 1, 1, dtype=F16))
    y = torch.empty(4, 16, 1, 1, dtype=F16)
    assert x.stride() == (32, 1, 1, 1) and y.stride() == (16, 1, 1, 1)
    for kernel in (registry.get(GEMM_1X1["fwd"].name), registry.get(IM2COL.name)):
        y.fill_(float("nan"))
        _check(kernel, problem, x=x, w=w, y=y)
        assert not y.isnan().any()
    dgrad = td.ConvProblem("bwd_data", 4, 32, 16, 1, (1, 1), (1, 1), dtype="fp16")
    dy = cl(torch.randn(4, 16, 1, 1, dtype=F16))
    _check(registry.get(GEMM_1X1["bwd_data"].name), dgrad, w=w, y=dy)


def test_repeat_calls_with_torchs_strides_on_size_one_dims(registry):
    """td.conv's remembered launch (second call) reads the canonical strides too: a (K, C, 1, 1) weight as
    torch keeps it (strides (C, 1, 1, 1)), the layout tiledispatch.nn leaves on converted modules."""
    from tiledispatch.dispatch import defaults

    defaults.install(("conv", "fwd", "fp16", 2, "none", False), registry)
    try:
        x, w = cl(torch.randn(2, 16, 7, 7, dtype=F16)), cl(torch.randn(32, 16, 1, 1, dtype=F16))
        assert w.stride() == (16, 1, 1, 1)
        want = torch.nn.functional.conv2d(x.float(), w.float(), stride=2)
        for _ in range(2):   # first call (checks, selects, binds), then the remembered launch
            torch.testing.assert_close(td.conv(x, w, stride=2).float(), want, atol=2e-2, rtol=2e-2)
    finally:
        defaults.reset()
