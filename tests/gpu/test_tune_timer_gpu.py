"""GPU lane: the timer `auto` and `tune` use (bench/tune.plan_timer) measures the device, not the host: a call
that spends 300 us on the host before a short kernel is timed near the kernel alone (triton's do_bench, used
before, timed such a call at its host time)."""
from __future__ import annotations

import time

import pytest
import torch

from tiledispatch.bench.tune import plan_timer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

HOST_S = 300e-6


@pytest.mark.parametrize("quick", [True, False])
def test_host_time_of_a_call_stays_out_of_its_timing(quick: bool) -> None:
    device = torch.device("cuda")
    x = torch.zeros(1 << 20, device=device)

    def kernel() -> None:
        x.add_(1.0)

    def slow_host() -> None:
        end = time.perf_counter() + HOST_S
        while time.perf_counter() < end:
            pass
        x.add_(1.0)

    timed = plan_timer(device, quick)
    alone, behind_host = timed(kernel), timed(slow_host)
    assert behind_host < 0.5 * HOST_S * 1e3, (alone, behind_host)
    assert behind_host == pytest.approx(alone, rel=0.5, abs=0.01)
