"""Timing: CUDA events via triton.testing.do_bench (median) on the GPU, wall clock on the interpreter."""
from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable


def time_ms(fn: Callable[[], object], device, warmup_ms: int = 25, rep_ms: int = 100) -> float:
    if device.type == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    return statistics.median(wall_samples_ms(fn))


def wall_samples_ms(fn: Callable[[], object], repeats: int = 3) -> list[float]:
    """Wall-clock milliseconds of `repeats` calls after one warm-up call (the interpreter's timer)."""
    fn()
    return wall_ms(fn, repeats)


def wall_ms(fn: Callable[[], object], count: int) -> list[float]:
    """Wall-clock milliseconds of `count` calls."""
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


@dataclasses.dataclass(frozen=True)
class StopRule:
    """When a sweep stops sampling one kernel. After `warmup` calls (whose times estimate the next chunk),
    samples come in chunks of at most `chunk`; sampling ends once the median of all samples moved less than
    `rtol` over the last chunk with at least `min_samples` taken (stable), or once `budget_ms` of kernel time
    was sampled (at least 3 samples), or at `max_samples`."""

    warmup: int = 2
    chunk: int = 5
    min_samples: int = 10
    max_samples: int = 100
    rtol: float = 0.01
    budget_ms: float = 25.0


@dataclasses.dataclass(frozen=True)
class Samples:
    median_ms: float
    p20_ms: float
    p80_ms: float
    count: int
    stable: bool


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


class HostPace:
    """The host seconds per sample of one callable, as last measured by flushed_event_samples: carried from
    one chunk of samples to the next, so that each chunk's sleep covers the callable's host time from its
    first sample on."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


def flushed_event_samples(fn: Callable[[], object], count: int, flush, device,
                          pace: HostPace | None = None) -> list[float]:
    """Milliseconds of `count` calls of fn on a CUDA device, each between two CUDA events, with `flush` (a
    buffer larger than L2) zeroed before it outside the events; one synchronization at the end.

    The host keeps ahead of the device: each run of up to AHEAD_SAMPLES samples is queued behind a sleep
    kernel as long as the host took per sample so far (times AHEAD_MARGIN), so no call's enqueue lands between
    its events. Without it a launch path slower on the host than a flush plus the call on the device measured
    its host time: on the H200, padded 777x1234x555 bf16 plans (50-130 us of host time per call, 17-24 us on
    the device) sampled 23-150 us. `pace` carries the host time per sample across calls (SweepTimer's chunks
    of 5): started from the first guess on every chunk, a call with 300 us of host time timed at 20-160 us
    against 6 us alone (stop 50, H200 GPU lane)."""
    import torch

    pace = pace or HostPace(AHEAD_FIRST_GUESS_S)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(count)]
    for first in range(0, count, AHEAD_SAMPLES):
        run = events[first:first + AHEAD_SAMPLES]
        torch.cuda._sleep(int(pace.seconds * len(run) * AHEAD_MARGIN * SLEEP_CYCLES_PER_S))
        began = time.perf_counter()
        for start, end in run:
            flush.zero_()
            start.record()
            fn()
            end.record()
        pace.seconds = (time.perf_counter() - began) / len(run)
    torch.cuda.synchronize(device)
    return [start.elapsed_time(end) for start, end in events]


AHEAD_SAMPLES = 16            # samples queued behind one sleep
AHEAD_MARGIN = 1.5            # the sleep's length over the host time those samples are expected to take
AHEAD_FIRST_GUESS_S = 100e-6  # host seconds per sample assumed before any was measured
SLEEP_CYCLES_PER_S = 2.0e9    # torch.cuda._sleep counts SM clock cycles: ~2 GHz on H100 / H200 (slower
                              # clocks only lengthen the sleep)


# The flush also keeps the GPU busy while the host enqueues the call (and the sleeps above the rest of it):
# the start event runs when the flush ends, so a launch path whose host time exceeds the flush would leave the
# GPU idle inside the events. A 64 MB flush (about 20 us on an H200) let the host's 10-35 us per call of the
# conv launch paths leak in: small problems measured 29-60 us against 3-20 us of device time (2026-11-24),
# which made the cost models shun the cheaper-to-run but costlier-to-launch instances. 256 MB (about 70 us)
# hides most.
FLUSH_MB = 256


class SweepTimer:
    """Times one callable after another on one device: CUDA events around each call with the L2 flushed
    (a `flush_mb` buffer zeroed, outside the events) before it; perf_counter on the CPU interpreter."""

    def __init__(self, device, rule: StopRule = StopRule(), flush_mb: int = FLUSH_MB) -> None:
        self.device, self.rule = device, rule
        self._flush = None
        if device.type == "cuda":
            import torch

            self._flush = torch.empty(flush_mb * 2**20, dtype=torch.int8, device=device)

    def _chunk(self, fn: Callable[[], object], count: int, pace: HostPace) -> list[float]:
        if self._flush is None:
            return wall_ms(fn, count)
        return flushed_event_samples(fn, count, self._flush, self.device, pace)

    def measure(self, fn: Callable[[], object]) -> Samples:
        rule = self.rule
        pace = HostPace(AHEAD_FIRST_GUESS_S)   # fn's host time per sample, learned by the warm-up
        warm = self._chunk(fn, rule.warmup, pace)
        estimate = statistics.median(warm) if warm else None
        samples: list[float] = []
        stable = False
        while True:
            left = rule.budget_ms - sum(samples)
            count = rule.chunk if estimate is None else max(1, min(rule.chunk,
                                                                   math.ceil(left / max(estimate, 1e-4))))
            before = statistics.median(samples) if samples else None
            samples += self._chunk(fn, count, pace)
            estimate = statistics.median(samples)
            if (len(samples) >= rule.min_samples and before is not None
                    and abs(estimate - before) <= rule.rtol * estimate):
                stable = True
                break
            if len(samples) >= rule.max_samples or (sum(samples) >= rule.budget_ms and len(samples) >= 3):
                break
        return Samples(statistics.median(samples), quantile(samples, 0.2), quantile(samples, 0.8),
                       len(samples), stable)
