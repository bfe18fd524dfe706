"""tools/probe_dense3d.py (the GPU part needs a GPU): the tap-folded twin of a layer has its FLOPs, output
extent and reduction length with one tap and no halo, and the im2col GEMM shape matches."""
from __future__ import annotations

import math

import pytest

import tiledispatch as td


@pytest.fixture(scope="module")
def tool(load_script):
    return load_script("tools/probe_dense3d.py")


def test_folded_twin_and_gemm_shape(tool):
    layer = td.ConvProblem("fwd", 2, 24, 40, 1, (5, 9, 7), (3, 3, 3), 1, 1, 1, "bf16")
    twin = tool.folded(layer)
    assert twin.filter == (1, 1, 1) and twin.c == 24 * 27 and twin.k == 40 and twin.output == layer.output
    assert twin.flops == layer.flops and all(p == (0, 0) for p in twin.padding)
    assert tool.im2col_shape(layer) == (2 * math.prod(layer.output), 40, 24 * 27)
