"""benchmarks/module_overhead.host_samples on the CPU with a fake CUDA: the variants alternate trial by trial,
and each loop is queued behind a sleep twice as long as that variant's previous loop."""
from __future__ import annotations

import copy
import importlib.util
import statistics
import time
from pathlib import Path

import torch

from tiledispatch.bench.timer import SLEEP_CYCLES_PER_S

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("module_overhead_under_test",
                                                  ROOT / "benchmarks" / "module_overhead.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_variants_alternate_behind_sleeps_that_cover_their_loops(monkeypatch):
    events: list[tuple[str, float]] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "_sleep",
                        lambda cycles: events.append(("sleep", cycles / SLEEP_CYCLES_PER_S)))

    def busy(name: str, seconds: float):
        def call() -> None:
            if not events or events[-1][0] != name:
                events.append((name, 0.0))
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                pass
        return call

    samples = _load().host_samples({"torch": busy("torch", 20e-6), "converted": busy("converted", 60e-6)},
                                   10, 4)
    us = {name: statistics.median(values) for name, values in samples.items()}
    order = [name for name, _ in events if name != "sleep"]
    assert order == ["torch", "converted", "converted", "torch", "torch", "converted", "converted", "torch"]
    assert 20 <= us["torch"] < us["converted"] and us["converted"] >= 60
    sleeps = {name: [] for name in ("torch", "converted")}
    for (kind, seconds), (name, _) in zip(events[0::2], events[1::2]):
        assert kind == "sleep"
        sleeps[name].append(seconds)
    assert all(s >= 2 * 10 * 60e-6 for s in sleeps["converted"][1:])   # twice its previous loop
    assert all(s >= 2 * 10 * 20e-6 for s in sleeps["torch"][1:])


def test_the_per_call_copy_carries_no_step_check_and_the_other_does():
    from tiledispatch.nn.step_check import ATTR, run_step_check

    stock = torch.nn.Conv2d(8, 8, 3, padding=1)
    ours, checked = _load().converted_copies(stock, "conv")
    assert not ours._forward_pre_hooks and not hasattr(ours, ATTR)
    assert list(checked._forward_pre_hooks.values()) == [run_step_check] and hasattr(checked, ATTR)
    assert type(ours) is type(checked) is not torch.nn.Conv2d
    assert ours.weight is not stock.weight and checked.weight is not ours.weight


def test_paired_difference_takes_the_median_of_per_trial_differences():
    samples = {"torch": [10.0, 30.0, 12.0, 50.0, 11.0], "converted": [12.0, 31.0, 15.0, 52.0, 20.0]}
    # per trial: +2, +1, +3, +2, +9 -> median +2 (the medians of each list differ by 20 - 12 = 8)
    assert _load().paired_us(samples, "converted", "torch") == 2.0


def test_every_row_times_a_second_torch_copy_in_the_same_alternation(monkeypatch):
    module = _load()
    seen: list[list[str]] = []

    def fake_samples(fns, calls, trials):
        seen.append(list(fns))
        return {name: [float(i + 1)] * 3 for i, name in enumerate(fns)}

    monkeypatch.setattr(module, "host_samples", fake_samples)
    monkeypatch.setattr(module, "per_call_us", lambda fn, calls, trials, sync: 1.0)
    stock = torch.nn.Conv2d(8, 8, 3, padding=1)
    # torch copies stand in for the converted ones: the interpreter is not what this test is about
    ours, checked = copy.deepcopy(stock), copy.deepcopy(stock)
    monkeypatch.setattr(module, "build", lambda layer: (stock, ours, checked, torch.randn(1, 8, 6, 6)))
    opts = type("Opts", (), {"issue_calls": 2, "trials": 3, "calls": 2})()
    rows = module.measure(("conv", None, None, None), opts)
    assert [r["phase"] for r in rows] == ["infer", "train"]
    assert all(names == ["torch", "converted", "converted_step_check", "torch_again"] for names in seen)
    for row in rows:
        assert row["aa_us"] == row["paired_aa_us"] == 3.0     # torch_again (4) - torch (1)
        assert row["extra_us"] == row["paired_extra_us"] == 1.0
