"""bench/timer on the CPU with a fake CUDA: the sleep each run of samples is queued behind covers the
callable's host time from the first sample of every chunk on (the host time learned carries over)."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch

from tiledispatch.bench import timer

HOST_S = 300e-6


class FakeEvent:
    def __init__(self, enable_timing: bool) -> None:
        self.at = 0.0

    def record(self) -> None:
        self.at = time.perf_counter()

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.at - self.at) * 1e3


@pytest.fixture
def sleeps(monkeypatch):
    """The seconds of every sleep kernel queued (cycles / SLEEP_CYCLES_PER_S)."""
    queued: list[float] = []
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: queued.append(cycles / timer.SLEEP_CYCLES_PER_S))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    return queued


def _slow_host() -> None:
    end = time.perf_counter() + HOST_S
    while time.perf_counter() < end:
        pass


def test_every_chunk_sleeps_for_the_host_time_learned_before(sleeps):
    """Stop 50 (H200 GPU lane): each chunk of 5 samples started again from the 100 us first guess, so a call
    with 300 us of host time leaked it into most samples (timed at 20-160 us against 6 us alone)."""
    sweep = timer.SweepTimer(SimpleNamespace(type="cpu"), timer.StopRule(warmup=2, chunk=5, min_samples=15,
                                                                      max_samples=15, rtol=0.0))
    sweep._flush = SimpleNamespace(zero_=lambda: None)
    sweep.measure(_slow_host)
    assert len(sleeps) == 4   # the warm-up, then three chunks of 5
    per_sample = [seconds / n / timer.AHEAD_MARGIN for seconds, n in zip(sleeps, (2, 5, 5, 5))]
    assert per_sample[0] == pytest.approx(timer.AHEAD_FIRST_GUESS_S)
    assert all(s >= HOST_S for s in per_sample[1:]), per_sample
