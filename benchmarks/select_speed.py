"""Selection speed (issue 6): ranking 300 candidates with the cost model on one CPU core, cold (a problem never
seen: features built, booster run), and a warm `Registry.select` of a problem seen before.

    python benchmarks/select_speed.py [--model DIR] [--out benchmarks/results/select_speed_cpu.json]

The model defaults to the shipped sm_90 GEMM bf16 one. Needs no GPU (the registry's kernels compile for sm_90
on the CPU; selection does not run them)."""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import tiledispatch as td
from tiledispatch.kernels.family import config_errors
from tiledispatch.presets import load_preset

CANDIDATES = 300


def _one_core() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    os.environ["OMP_NUM_THREADS"] = "1"


def _problems(count: int) -> list[td.GemmProblem]:
    """Distinct problems (none repeats, so every ranking is cold for its problem)."""
    return [td.GemmProblem(64 + 37 * i, 4096 - 16 * (i % 50), 1024 + 64 * (i % 30), dtype="bf16")
            for i in range(count)]


def rank_cold(model, arch, repeats: int = 50) -> dict:
    configs = [c for c in load_preset("gemm_bf16_rcr_all") if not config_errors(c, arch)][:CANDIDATES]
    problems = _problems(repeats + 1)
    start = time.perf_counter()
    model.scores(problems[0], configs, arch)          # the first call of the process: imports, caches empty
    first_ms = (time.perf_counter() - start) * 1e3
    times = []
    for problem in problems[1:]:
        start = time.perf_counter()
        model.scores(problem, configs, arch)
        times.append((time.perf_counter() - start) * 1e3)
    return {"candidates": len(configs), "first_call_ms": first_ms, "median_ms": statistics.median(times),
            "max_ms": max(times), "problems": repeats}


def warm_select(calls: int = 20000) -> dict:
    registry = td.Registry("sm_90")
    registry.add_preset("gemm_bf16_rcr_candidates")
    registry.build()
    problem = td.GemmProblem(4096, 4096, 4096, dtype="bf16")
    first = registry.select(problem)
    start = time.perf_counter()
    for _ in range(calls):
        registry.select(problem)
    per_call_us = (time.perf_counter() - start) / calls * 1e6
    return {"kernels": len(registry), "strategy": first.strategy, "notes": first.notes, "per_call_us": per_call_us}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="cost model directory [default: the shipped sm_90 gemm bf16 model]")
    parser.add_argument("--out", default="benchmarks/results/select_speed_cpu.json")
    args = parser.parse_args()
    _one_core()
    from tiledispatch.ml.model import CostModel
    from tiledispatch.select.cost_model import models_root

    arch = td.get_arch("sm_90")
    model = CostModel.load(args.model or models_root() / "sm_90" / "gemm_none_bf16", arch)
    result = {"benchmark": "select_speed", "cpu": platform.processor() or platform.machine(),
              "python": platform.python_version(), "tiledispatch": td.__version__, "model": model.describe(),
              "rank_300_cold": rank_cold(model, arch), "warm_select": warm_select(),
              "targets": {"rank_300_cold_ms": 5.0, "warm_select_us": 20.0}}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
