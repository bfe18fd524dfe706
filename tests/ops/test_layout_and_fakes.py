"""The custom ops without running a kernel: registration, argument normalization, channels-last strides, and
fake kernels (shapes against torch's own convolution, strides against the layout the kernels write)."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import tiledispatch as td
from tiledispatch import ops
from tiledispatch.ops.layout import as_channels_last, channels_last_strides, padding_pairs, same_padding


def test_importing_tiledispatch_registers_nothing_and_importing_ops_registers_every_op():
    code = ("import tiledispatch, torch\n"
            "print(hasattr(torch.ops.tiledispatch, 'conv'))\n"
            "import tiledispatch.ops\n"
            "print(all(hasattr(torch.ops.tiledispatch, name) for name in tiledispatch.ops.OPS))")
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True"]


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 888, 1, 1), (1, 3, 1, 5), (3, 1, 4, 4), (2, 3, 4, 5, 6),
                                   (1, 4, 1, 1, 1)])
def test_channels_last_strides_are_torchs_for_4d_and_5d(shape):
    fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    assert channels_last_strides(shape) == torch.empty(shape, memory_format=fmt).stride()


def test_channels_last_strides_1d_are_a_transposed_nlc_tensor():
    assert channels_last_strides((3, 4, 5)) == torch.empty(3, 5, 4).transpose(1, 2).stride()


def test_as_channels_last_copies_only_what_is_not_canonical():
    x = torch.randn(2, 3, 4, 5)
    y = as_channels_last(x)
    assert y.stride() == (60, 1, 15, 3) and torch.equal(x, y)
    assert as_channels_last(y) is y
    # a 1x1-spatial tensor whose size-1 strides differ from the canonical ones (a squeeze-excitation output)
    # is the same data under other strides: a view, no copy (a copy was an extra kernel per SE conv call)
    odd = torch.randn(2, 8).view(2, 8, 1, 1)
    view = as_channels_last(odd)
    assert odd.stride() == (8, 1, 1, 1) and view.stride() == (8, 1, 8, 8)
    assert view.data_ptr() == odd.data_ptr() and view._base is not None and torch.equal(view, odd)
    offset = torch.randn(3, 8)[1:].view(2, 8, 1, 1)          # the view keeps the storage offset
    assert torch.equal(as_channels_last(offset), offset)
    nchw = torch.randn(2, 8, 3, 1)                            # a size-1 dim, but the others differ: a copy
    assert as_channels_last(nchw).data_ptr() != nchw.data_ptr()


@pytest.mark.parametrize("value, ndim, flat", [
    (1, 2, [1, 1, 1, 1]), ((1, 2), 2, [1, 1, 2, 2]), (((0, 1), (2, 3)), 2, [0, 1, 2, 3]), ([3], 1, [3, 3]),
])
def test_padding_pairs(value, ndim, flat):
    assert padding_pairs(value, ndim) == flat


@pytest.mark.parametrize("value", [(1, 2, 3), "full", ((1, 2, 3), (1, 2, 3))])
def test_bad_padding_names_the_field(value):
    with pytest.raises(td.BadInput) as info:
        padding_pairs(value, 2)
    assert info.value.field == "padding"


@pytest.mark.parametrize("kernel, dilation", [((3, 4), (1, 1)), ((2, 5), (3, 1)), ((4,), (2,))])
def test_same_padding_reproduces_torchs_same(kernel, dilation):
    """Even kernels pad one more on the right, as torch does: the same values as F.pad + a 'valid' conv."""
    ndim = len(kernel)
    x = torch.randn(1, 2, *([7] * ndim), dtype=torch.float64)
    w = torch.randn(3, 2, *kernel, dtype=torch.float64)
    conv = (F.conv1d, F.conv2d)[ndim - 1]
    flat = same_padding(kernel, dilation)
    torch_pad = [p for i in reversed(range(ndim)) for p in (flat[2 * i], flat[2 * i + 1])]
    ref = conv(x, w, padding="same", dilation=dilation)
    assert torch.allclose(conv(F.pad(x, torch_pad), w, dilation=dilation), ref)


# Why each case: stride 2 with an odd size (floor), asymmetric padding, dilation with 'same', depthwise 1-D,
# 3-D with per-dim geometry, a 1x1 conv on a 1x1 input (squeeze-excitation).
FAKE_CASES = [
    ((2, 6, 9, 7), (4, 3, 3, 3), {"stride": 2, "padding": 1, "groups": 2}),
    ((1, 4, 6, 5), (8, 4, 2, 3), {"padding": ((0, 1), (2, 0))}),
    ((1, 4, 6, 5), (4, 4, 2, 3), {"padding": "same", "dilation": 2}),
    ((2, 8, 11), (8, 1, 5), {"stride": 3, "padding": 2, "groups": 8}),
    ((1, 4, 5, 6, 7), (6, 2, 3, 1, 2),
     {"stride": (1, 2, 3), "padding": (1, 0, 1), "dilation": (2, 1, 1), "groups": 2}),
    ((3, 16, 1, 1), (4, 16, 1, 1), {}),
]


def _torch_args(kwargs):
    padding = kwargs.get("padding", 0)
    if isinstance(padding, tuple) and isinstance(padding[0], tuple):   # torch has no asymmetric padding
        return None
    return {"padding": padding, **{k: v for k, v in kwargs.items() if k != "padding"}}


@pytest.mark.parametrize("x_shape, w_shape, kwargs", FAKE_CASES)
def test_fake_conv_ops_give_torchs_shapes_and_channels_last_strides(x_shape, w_shape, kwargs):
    ndim = len(x_shape) - 2
    conv = (F.conv1d, F.conv2d, F.conv3d)[ndim - 1]
    defaults = (("stride", 1), ("padding", 0), ("dilation", 1), ("groups", 1))
    geometry = {k: kwargs.get(k, d) for k, d in defaults}
    targs = _torch_args(kwargs)
    with FakeTensorMode():
        x, w = torch.empty(x_shape), torch.empty(w_shape)
        y = ops.conv(x, w, torch.empty(w_shape[0]), **geometry, activation="gelu")
        if targs is not None:
            assert y.shape == conv(x, w, **targs).shape
        assert y.stride() == channels_last_strides(y.shape)
        dx = ops.conv_bwd_data(y, w, x.shape, **geometry)
        dw = ops.conv_bwd_weight(x, y, w.shape, **geometry)
    assert dx.shape == x.shape and dx.stride() == channels_last_strides(x_shape)
    assert dw.shape == w.shape and dw.stride() == channels_last_strides(w_shape)


@pytest.mark.parametrize("a_shape, b_shape, out", [
    ((5, 7), (7, 3), (5, 3)), ((2, 5, 7), (7, 3), (2, 5, 3)), ((5, 7), (2, 7, 3), (2, 5, 3)),
    ((2, 5, 7), (2, 7, 3), (2, 5, 3))])
def test_fake_gemm_shapes(a_shape, b_shape, out):
    with FakeTensorMode():
        y = ops.gemm(torch.empty(a_shape), torch.empty(b_shape))
        s = ops.gemm_scaled(torch.empty(a_shape, dtype=torch.float8_e4m3fn),
                            torch.empty(b_shape, dtype=torch.float8_e4m3fn), torch.ones(()), torch.ones(()))
    assert y.shape == out and y.is_contiguous() and s.shape == out and s.dtype == torch.bfloat16


@pytest.mark.parametrize("call, field", [
    (lambda x, w: ops.conv(x, w, groups=3), "groups"),
    (lambda x, w: ops.conv(x, w[0]), "input"),
    (lambda x, w: ops.conv(x, w, stride=(1, 1, 1)), "stride"),
    (lambda x, w: ops.conv(x, w, padding="same", stride=2), "padding"),
    (lambda x, w: ops.conv(x, w, activation="swish"), "activation"),
    (lambda x, w: ops.gemm(x[0, 0], w[0, 0].T), "b"),
    (lambda x, w: ops.conv(x, w, bias=w[0, 0, 0]), "bias"),
    (lambda x, w: ops.conv(x[:, :, :2], w), "spatial"),
    (lambda x, w: ops.conv_bwd_data(x, w, (1, 4, 8, 8), padding=1), "dy"),
    (lambda x, w: ops.conv_bwd_weight(x, x, w.shape, padding=0), "dy"),
])
def test_bad_arguments_raise_typed_errors_while_tracing(call, field):
    with FakeTensorMode():
        x, w = torch.empty(1, 4, 6, 6), torch.empty(4, 4, 3, 3)
        with pytest.raises(td.TileDispatchError) as info:
            call(x, w)
    assert info.value.field == field


def test_gemm_operands_that_alias_are_copied_before_td_gemm():
    """A Linear on one row whose loss is .sum() gets a (1, N) gradient with strides (0, 0): td.gemm cannot
    read it in place (its rows alias), so the op copies it; dense and size-1 layouts stay in place."""
    from tiledispatch.ops.gemm_ops import matrix as _matrix

    grad = torch.ones(()).expand(1, 5)
    assert grad.stride() == (0, 0)
    fixed = _matrix(grad)
    assert fixed.stride(-1) == 1 and torch.equal(fixed, grad)
    dense = torch.randn(3, 5)
    transposed = dense.t()
    assert _matrix(dense) is dense and _matrix(transposed) is transposed
    column = torch.randn(4, 1)
    assert _matrix(column) is column
