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


CASES = [  # (direction, ndim, geometry): odd sizes, padding past the reach, a dilation, 2 channel chunks
    ("fwd", 3, {"spatial": (3, 5, 9), "filter": (2, 3, 3), "padding": ((1, 0), (1, 1), (2, 2)),
                "dilation": (2, 1, 1)}),
    ("bwd_data", 2, {"spatial": (5, 11), "filter": (3, 2), "padding": ((1, 2), (1, 0)), "dilation": (1, 2)}),
]


@pytest.mark.parametrize("direction,ndim,geometry", CASES, ids=["fwd-3d", "bwd_data-2d"])
def test_the_counter_form_matches_the_reference(tool, tmp_path, direction, ndim, geometry):
    """The rewritten loop (incremental_taps) on the interpreter, fp16, against the float64 reference."""
    from tiledispatch.codegen.render import render_source
    from tiledispatch.configs.conv import ConvConfig
    from tiledispatch.testing.reference import run_and_validate

    cfg = ConvConfig(family="tma", direction=direction, ndim=ndim, dtype="fp16",
                     block_m=64 if ndim == 3 else 16, block_n=16, block_k=16, num_warps=4, num_stages=2,
                     align=8)
    source = tool.incremental_taps(render_source(cfg))
    assert "tap = it // n_chunks" not in source and "kc = tl.where(wrap, 0, kc)" in source
    registry = td.Registry("sm_90", cache_dir=tmp_path)
    kernel = registry.add(cfg, source=source)
    assert not registry.build(max_workers=1).failed
    problem = td.ConvProblem(direction, 2, 24, 24, 1, dtype="fp16", **geometry)
    _, _, result = run_and_validate(kernel, problem)
    assert result["passed"], result


def test_split_instances_are_refused(tool):
    from tiledispatch.codegen.render import render_source
    from tiledispatch.configs.naming import parse_name

    with pytest.raises(ValueError):
        tool.incremental_taps(render_source(parse_name(
            "conv-tma-fwd-3d-bf16-bf16-fp32-128x64x64-g1-w4-s4-k4-tap-a8-none-b0")))
