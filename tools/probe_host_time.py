"""Probe: host time per call of each plan's launch path against its device time, on the GPU.

For every plan of a preset on each shape: host microseconds per call while the GPU is kept busy (a sleep
kernel first, so no call waits on the device), the device time of back-to-back calls queued behind that sleep,
and the benchmark protocol's flushed times (median, p80). Where the host time of a call approaches the flushed
GPU time of one sample (flush + call), the host falls behind and its enqueue gaps land inside the events.

    python tools/probe_host_time.py --preset gemm_bf16_rcr_essential --shapes 777x1234x555,1000x1000x1000
        [--json PATH]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch

import tiledispatch as td
from tiledispatch.bench.timer import FLUSH_MB, flushed_event_samples, quantile
from tiledispatch.runtime.execute import run_selection
from tiledispatch.testing.inputs import make_args
from tiledispatch.select.selector import Selection

CALLS = 200
SLEEP_CYCLES = 200_000_000   # ~0.1 s at H200 clocks: longer than the host takes to enqueue CALLS calls


def measure(fn, flush: torch.Tensor) -> dict[str, float]:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(CALLS):
        fn()
    end.record()
    host_us = (time.perf_counter() - t0) / CALLS * 1e6
    torch.cuda.synchronize()
    device_us = start.elapsed_time(end) / CALLS * 1e3
    samples = flushed_event_samples(fn, 100, flush, torch.device("cuda"))
    return {"host_us": host_us, "queued_device_us": device_us, "flushed_median_us": quantile(samples, 0.5) * 1e3,
            "flushed_p80_us": quantile(samples, 0.8) * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="gemm_bf16_rcr_essential")
    parser.add_argument("--shapes", default="777x1234x555,1000x1000x1000")
    parser.add_argument("--json")
    opts = parser.parse_args()
    reg = td.Registry(td.detect())
    reg.add_preset(opts.preset)
    assert not reg.build().failed
    _, dtype, layout, _ = opts.preset.split("_", 3)
    flush = torch.empty(FLUSH_MB * 2**20, dtype=torch.int8, device="cuda")
    rows = []
    for shape in opts.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        problem = td.GemmProblem(m, n, k, 1, dtype, layout=layout)
        args = make_args(problem, torch.device("cuda"), seed=0)
        for plan in reg.plans(problem):
            selection = Selection(plan.kernel, "probe", plan.problem, plan.padded)
            out = run_selection(selection, dataclasses.replace(args, out=None))
            call_args = dataclasses.replace(args, out=out)
            row = {"shape": shape, "plan": plan.label, **measure(lambda: run_selection(selection, call_args), flush)}
            rows.append(row)
            print(f"{shape:16s} host {row['host_us']:6.1f} us  queued {row['queued_device_us']:6.1f} us  flushed "
                  f"{row['flushed_median_us']:6.1f} / p80 {row['flushed_p80_us']:6.1f} us  {plan.label}", flush=True)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "preset": opts.preset, "calls": CALLS, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
