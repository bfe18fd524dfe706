"""The conv ops return the tensor td.conv* allocated (channels-last already) instead of writing into one of
their own: with `out=` a vendor plan ran cuDNN into a fresh tensor and then copied it into `out`, a device
copy per call (33 per ResNet-50 training step under reduce-overhead on an H200)."""
from __future__ import annotations

import pytest
import torch

from tiledispatch.ops import conv_ops
from tiledispatch.ops.layout import channels_last_strides, empty_channels_last


def _fake_td(shape_of, produced: list, strides_of=channels_last_strides):
    def run(*args, **kwargs):
        assert kwargs.get("out") is None, "the op must let td allocate the result"
        shape = shape_of(args)
        t = torch.empty_strided(shape, strides_of(shape), dtype=args[0].dtype)
        produced.append(t)
        return t
    return run


@pytest.mark.parametrize("op, name, shape_of", [
    (conv_ops._conv_kernel, "conv", lambda a: (2, 8, 5, 5)),
    (conv_ops._bwd_data_kernel, "conv_bwd_data", lambda a: (2, 4, 5, 5)),
    (conv_ops._bwd_weight_kernel, "conv_bwd_weight", lambda a: (8, 4, 3, 3)),
])
def test_the_result_is_the_one_td_allocated(monkeypatch, op, name: str, shape_of) -> None:
    produced: list = []
    monkeypatch.setattr(conv_ops.td, name, _fake_td(shape_of, produced))
    x = empty_channels_last((2, 4, 5, 5), torch.float32, torch.device("cpu"))
    w = empty_channels_last((8, 4, 3, 3), torch.float32, torch.device("cpu"))
    dy = empty_channels_last((2, 8, 5, 5), torch.float32, torch.device("cpu"))
    geometry = ([1, 1], [1, 1, 1, 1], [1, 1], 1)
    if name == "conv":
        got = op(x, w, None, *geometry, "none")
    elif name == "conv_bwd_data":
        got = op(dy, w, [2, 4, 5, 5], *geometry)
    else:
        got = op(x, dy, [8, 4, 3, 3], *geometry)
    assert got is produced[0]


def test_a_result_with_other_strides_in_a_size_one_dim_is_made_canonical(monkeypatch) -> None:
    """cuDNN may keep other strides in size-1 dims (1x1 spatial outputs): the op returns the fake kernel's."""
    produced: list = []
    row_major = lambda shape: torch.empty(shape).stride()   # noqa: E731
    monkeypatch.setattr(conv_ops.td, "conv", _fake_td(lambda a: (2, 8, 1, 1), produced, row_major))
    x = empty_channels_last((2, 4, 3, 3), torch.float32, torch.device("cpu"))
    w = empty_channels_last((8, 4, 3, 3), torch.float32, torch.device("cpu"))
    got = conv_ops._conv_kernel(x, w, None, [1, 1], [0, 0, 0, 0], [1, 1], 1, "none")
    assert got.stride() == channels_last_strides((2, 8, 1, 1)) and got is not produced[0]
