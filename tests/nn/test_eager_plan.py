"""nn/eager.LayerPlan: a conv module signature runs torch's own layer exactly when the GPU time td's picks
save over the vendor library does not pay for the td path's host cost (pure: stand-in selections)."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from tiledispatch.nn.eager import HOST_COST_US, LayerPlan
from tiledispatch.select.selector import UNITS


def _selection(kernel: str, family: str, times_ms: dict[str, float] | None) -> SimpleNamespace:
    return SimpleNamespace(kernel=SimpleNamespace(name=kernel, config=SimpleNamespace(family=family)),
                           padded=False, ranking=sorted((times_ms or {}).items(), key=lambda kv: kv[1]),
                           ranking_unit=UNITS["tune"] if times_ms else UNITS["ml"])


def _ours(direction: str, ours_ms: float | None, vendor_ms: float | None) -> SimpleNamespace:
    times = None if ours_ms is None else {"ours": ours_ms, f"vendor-cudnn-conv-{direction}": vendor_ms}
    return _selection("ours", "igemm", times)


def _vendor(direction: str) -> SimpleNamespace:
    return _selection(f"vendor-cudnn-conv-{direction}", "vendor", None)


def test_undecided_until_every_direction_ran():
    plan = LayerPlan((True, True))
    plan.learn("fwd", _vendor("fwd"))
    plan.learn("bwd_data", _vendor("bwd_data"))
    assert not plan.on_torch                        # bwd_weight not seen yet
    plan.learn("bwd_weight", _vendor("bwd_weight"))
    assert plan.on_torch and plan.vendor_backward


@pytest.mark.parametrize("saved_us, on_torch", [(0.5 * HOST_COST_US["train"], True),
                                                (2.0 * HOST_COST_US["train"], False)])
def test_training_layer_keeps_td_only_where_its_savings_pay_the_host_cost(saved_us, on_torch):
    plan = LayerPlan((True, True))
    plan.learn("fwd", _ours("fwd", 1.0, 1.0 + saved_us / 1e3))   # ms
    plan.learn("bwd_data", _vendor("bwd_data"))
    plan.learn("bwd_weight", _vendor("bwd_weight"))
    assert math.isclose(plan.saved["fwd"], saved_us)
    assert plan.on_torch is on_torch and plan.vendor_backward


def test_a_pick_made_without_timing_the_vendor_is_trusted():
    plan = LayerPlan((False, False))                # inference: forward only
    plan.learn("fwd", _ours("fwd", None, None))     # ranked by the cost model: no vendor time known
    assert plan.saved["fwd"] == math.inf and not plan.on_torch


def test_inference_uses_the_inference_host_cost():
    plan = LayerPlan((False, False))
    plan.learn("fwd", _ours("fwd", 1.0, 1.0 + 2 * HOST_COST_US["infer"] / 1e3))
    assert not plan.on_torch
    cheap = LayerPlan((False, False))
    cheap.learn("fwd", _ours("fwd", 1.0, 1.0 + 0.5 * HOST_COST_US["infer"] / 1e3))
    assert cheap.on_torch
