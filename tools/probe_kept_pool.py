"""Probe: what a kept compile pool saves on-demand compiles (build/pool.py, run_tasks(keep=True)). Compiles
N small fp16 rcr GEMM kernels for sm_90 one batch at a time (as a model's first step compiles one layer
problem's picks at a time), into a fresh cache, once with a fresh spawned pool per batch and once with the
kept pool; prints and records the seconds per batch. Runs without a GPU.

    python tools/probe_kept_pool.py [--kernels 6] [--workers 2] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time

import tiledispatch as td
from tiledispatch.build import pool
from tiledispatch.testing import suites


def batches(keep: bool, count: int, workers: int) -> list[float]:
    configs = [c for c in suites.all_configs()
               if c.dtype == "fp16" and c.layout == "rcr" and c.epilogue.is_identity][:count]
    registry = td.Registry("sm_90", cache_dir=tempfile.mkdtemp(prefix="td-kept-"))
    for cfg in configs:
        registry.add(cfg, on_demand=True)
    seconds = []
    for kernel in registry.kernels:
        start = time.perf_counter()
        report = registry.compile_on_demand([kernel], progress=False) if keep else registry._build(
            [kernel], workers, False, "compiling {n}")
        assert report.built == [kernel.name], report.failed
        seconds.append(round(time.perf_counter() - start, 3))
    pool._KEPT.shutdown()
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=6)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json")
    opts = ap.parse_args()
    rows = {name: batches(keep, opts.kernels, opts.workers) for name, keep in (("fresh", False), ("kept", True))}
    for name, seconds in rows.items():
        print(f"{name}: per batch {seconds}, total {sum(seconds):.2f} s")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"probe": "kept_pool", "machine": platform.processor() or platform.machine(),
                       "tiledispatch": td.__version__, "kernels": opts.kernels, "workers": opts.workers,
                       "seconds_per_batch": rows}, f, indent=1)


if __name__ == "__main__":
    main()
