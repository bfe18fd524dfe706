"""GPU lane for kloop 'roll' at model sizes, where each program walks several rows (the all-preset test's small
shapes give one row per program on a full GPU): every roll instance of the bf16 `_all` presets against the
float64 reference (pytest -m gpu)."""
from __future__ import annotations

import pytest
import torch

import tiledispatch as td
from tiledispatch.kernels import conv_roll
from tiledispatch.testing.reference import check_kernels

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# MobileNetV2-like 2-D depthwise (stride 1 and 2, 144 and 96 channels: a half-filled last channel tile at 32),
# X3D-like 3-D depthwise with 54 channels (align 2) and stride 2 along H and W, and 64 channels (align 8);
# odd heights so the last row chunk runs past the height
PROBLEMS = {
    2: [dict(n=32, c=144, k=144, groups=144, spatial=(57, 56), filter=(3, 3), stride=1, padding=1),
        dict(n=32, c=96, k=96, groups=96, spatial=(113, 112), filter=(3, 3), stride=2, padding=1)],
    3: [dict(n=8, c=54, k=54, groups=54, spatial=(8, 57, 56), filter=(3, 3, 3), stride=1, padding=1),
        dict(n=8, c=54, k=54, groups=54, spatial=(8, 57, 56), filter=(3, 3, 3), stride=(1, 2, 2), padding=1),
        dict(n=8, c=64, k=64, groups=64, spatial=(8, 29, 28), filter=(3, 3, 3), stride=1, padding=1)],
}


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
@pytest.mark.parametrize("ndim", [2, 3])
def test_roll_instances_over_several_rows_per_program(direction, ndim):
    reg = td.Registry(td.detect())
    reg.add_preset(f"conv_{direction}_bf16_{ndim}d_all")
    kernels = [k for k in reg.kernels if k.config.kloop == "roll"]
    assert kernels
    report = reg.build()
    assert not report.failed, report.failed
    failures, runs = [], 0
    for fields in PROBLEMS[ndim]:
        problem = td.ConvProblem(direction, dtype="bf16", **fields)
        supported = [k for k in kernels if k.is_supported(problem)]
        assert any(conv_roll.rows_plan(k.config, problem, reg.arch.sm_count)[0] > 1 for k in supported) or \
            not supported
        count, failed = check_kernels(supported, problem)
        runs += count
        failures += failed
    print(f"roll {direction} {ndim}d: {runs} kernel runs, {len(failures)} failures")
    assert runs > 0
    assert not failures, "\n".join(failures[:20])
