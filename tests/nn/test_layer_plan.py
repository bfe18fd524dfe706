"""nn/layer_plan.LayerPlan: per signature, td's path or torch's layer, whichever has the lower summed per-part
max(host time, GPU time); GPU times from td's measured selections, host times sampled (pure: stand-in
selections and host samples)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from tiledispatch.nn import layer_plan
from tiledispatch.nn.layer_plan import SAMPLES, LayerPlan
from tiledispatch.select.selector import UNITS


def _selection(kernel: str, family: str, times_ms: dict[str, float] | None) -> SimpleNamespace:
    return SimpleNamespace(kernel=SimpleNamespace(name=kernel, config=SimpleNamespace(family=family)),
                           padded=False, ranking=sorted((times_ms or {}).items(), key=lambda kv: kv[1]),
                           ranking_unit=UNITS["tune"] if times_ms else UNITS["ml"])


def _ours(direction: str, ours_us: float | None, vendor_us: float | None) -> SimpleNamespace:
    vendor = f"vendor-cudnn-conv-{direction}"
    times = None if ours_us is None else {"ours": ours_us / 1e3, vendor: vendor_us / 1e3}
    return _selection("ours", "igemm", times)


def _vendor(direction: str) -> SimpleNamespace:
    return _selection(f"vendor-cudnn-conv-{direction}", "vendor", None)


def _sample(plan: LayerPlan, path: str, us: dict[str, float], monkeypatch) -> None:
    """SAMPLES host times per part of `path`, each `us[part]` µs long."""
    for _ in range(SAMPLES):
        for part, value in us.items():
            monkeypatch.setattr(layer_plan, "clock", lambda value=value: 1.0 + value * 1e-6)
            plan.sample(path, part, 1.0)


def test_undecided_until_every_direction_ran_then_vendor_everywhere_is_torch():
    plan = LayerPlan((True, True))
    plan.learn("fwd", _vendor("fwd"))
    plan.learn("bwd_data", _vendor("bwd_data"))
    assert plan.stage == "td" and not plan.on_torch and not plan.timing("td")   # bwd_weight not seen yet
    plan.learn("bwd_weight", _vendor("bwd_weight"))
    assert plan.stage == "settled" and plan.on_torch and plan.vendor_backward


def test_a_pick_made_without_timing_the_vendor_is_trusted():
    plan = LayerPlan((False, False))                # inference: forward only
    plan.learn("fwd", _ours("fwd", None, None))     # ranked by the cost model: no vendor time known
    assert plan.stage == "settled" and not plan.on_torch


def test_td_host_then_torch_host_are_sampled_before_settling(monkeypatch):
    plan = LayerPlan((False, False))
    plan.learn("fwd", _ours("fwd", 100.0, 150.0))
    assert plan.stage == "td" and plan.timing("td") and not plan.timing("torch")
    _sample(plan, "td", {"fwd": 30.0}, monkeypatch)
    assert plan.stage == "torch" and plan.timing("torch")
    _sample(plan, "torch", {"fwd": 20.0}, monkeypatch)
    assert plan.stage == "settled" and not plan.on_torch      # GPU-bound: 100 us on td against 150
    assert plan.summary()["cost_us"] == {"td": 100.0, "torch": 150.0}


@pytest.mark.parametrize("td_host, on_torch", [(40.0, False), (90.0, True)])
def test_host_time_counts_where_it_exceeds_the_gpu_time(td_host, on_torch, monkeypatch):
    """A small layer saving 10 us of GPU time: worth td's path only while its host time stays lower too."""
    plan = LayerPlan((False, False))
    plan.learn("fwd", _ours("fwd", 20.0, 30.0))
    _sample(plan, "td", {"fwd": td_host}, monkeypatch)
    _sample(plan, "torch", {"fwd": 50.0}, monkeypatch)
    assert plan.on_torch is on_torch


def test_training_sums_forward_and_backward(monkeypatch):
    """Backward GPU time is both directions' (bwd_data on td; bwd_weight the vendor's on either path)."""
    plan = LayerPlan((True, True))
    plan.learn("fwd", _ours("fwd", 50.0, 60.0))
    plan.learn("bwd_data", _ours("bwd_data", 100.0, 300.0))
    plan.learn("bwd_weight", _vendor("bwd_weight"))
    assert plan.gpu["bwd_weight"] == (0.0, 0.0) and plan.stage == "td"
    _sample(plan, "td", {"fwd": 70.0, "bwd": 150.0}, monkeypatch)
    _sample(plan, "torch", {"fwd": 40.0, "bwd": 60.0}, monkeypatch)
    # td: max(70, 50) + max(150, 100 + 0) = 220; torch: max(40, 60) + max(60, 300 + 0) = 360
    assert plan.summary()["cost_us"] == {"td": 220.0, "torch": 360.0} and not plan.on_torch
