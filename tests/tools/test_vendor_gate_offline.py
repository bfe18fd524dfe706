"""tools/vendor_gate_offline.py: problem features are finite and see depthwise and the filter; the gate score
counts as gated only predictions above log T and takes the vendor's efficiency against min(ours, vendor)."""
from __future__ import annotations

import math

import pytest

import tiledispatch as td


@pytest.fixture(scope="module")
def tool(load_script):
    return load_script("tools/vendor_gate_offline.py")


def test_features(tool):
    dense = td.ConvProblem("fwd", 8, 64, 64, 1, (14, 14), (3, 3), 1, 1, 1, "bf16")
    depthwise = td.ConvProblem("fwd", 8, 64, 64, 64, (14, 14), (7, 1), 1, ((3, 3), (0, 0)), 1, "bf16")
    a, b = tool.features(dense), tool.features(depthwise)
    assert len(a) == len(b) and all(math.isfinite(v) for v in a + b)
    assert a != b and b[15] == 1.0 and a[15] == 0.0 and (b[9], b[10]) == (7, 1)


class Fixed:
    """A stand-in model that predicts the given log ratios in order."""

    def __init__(self, values):
        self.values = values

    def predict(self, x):
        assert len(x) == len(self.values)
        return self.values


def test_score_gates_above_the_threshold_only(tool):
    problem = td.ConvProblem("fwd", 8, 64, 64, 1, (14, 14), (3, 3), 1, 1, 1, "bf16")
    rows = [("a", 2.0), ("b", 0.5), ("c", 1.2)]           # eff_vendor: the vendor 2x faster, 2x slower, 1.2x
    model = Fixed([math.log(3.0), math.log(1.3), math.log(1.0)])
    out = tool.score(model, {"a": problem, "b": problem, "c": problem}, rows)
    gate = out["gates"]["1.25"]
    assert gate["gated"] == 2 and gate["gated_vendor_slower"] == 1 and gate["gated_worst_eff"] == 0.5
    assert gate["mean_eff_all"] == pytest.approx((1.0 + 0.5 + 1.0) / 3)
    assert out["gates"]["1.5"]["gated"] == 1
