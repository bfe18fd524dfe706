"""Timing: CUDA events via triton.testing.do_bench (median) on the GPU, wall clock on the interpreter."""
from __future__ import annotations

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
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples
