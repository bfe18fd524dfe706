"""tools/probe_se_view.py: the copying as_channels_last it restores for its A/B (GPU run: the tool)."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def tool(load_script):
    return load_script("tools/probe_se_view.py")


def test_copying_copies_size_one_stride_mismatches_where_the_current_one_views(tool):
    from tiledispatch.ops.layout import as_channels_last

    se = torch.randn(2, 3, 4, 4).mean((2, 3), keepdim=True)          # (2, 3, 1, 1) with strides (3, 1, 1, 1)
    copied, viewed = tool.copying(se), as_channels_last(se)
    assert copied.stride() == viewed.stride() == (3, 1, 3, 3)
    assert copied.data_ptr() != se.data_ptr() and viewed.data_ptr() == se.data_ptr()
    assert torch.equal(copied, se) and torch.equal(viewed, se)
    canonical = torch.randn(2, 3, 5, 5).contiguous(memory_format=torch.channels_last)
    assert tool.copying(canonical) is canonical


def test_the_patch_is_undone(tool):
    from tiledispatch.ops import conv_ops

    kept = conv_ops.as_channels_last
    seen = []

    def step():
        seen.append(conv_ops.as_channels_last)

    tool.warm(step, torch.device("cpu"), 2, copy=True)
    assert seen == [tool.copying, tool.copying] and conv_ops.as_channels_last is kept
