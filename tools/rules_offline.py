"""Offline check of a selection strategy against a full-matrix sweep: for every shape of the sweep, the plan the
strategy picks among a preset's instances (direct or exactly padded) and its measured time, relative to cuBLAS
and to the best instance of the preset. `rules` ranks by the analytic rules, `auto` as `select(problem,
'auto')` without a tuning DB (the shipped cost model where it knows the kernels, else the rules).
Usage: python tools/rules_offline.py SWEEP.json PRESET [rules|auto]"""
from __future__ import annotations

import json
import math
import sys

from tiledispatch.presets import load_preset
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.registry.kernel import Kernel
from tiledispatch.registry.registry import Registry
from tiledispatch.select.cost_model import shipped_model
from tiledispatch.select.selector import by_model_or_rules, by_rules, plans_of


def _ranked(strategy: str, registry: Registry, plans: list, problem: GemmProblem) -> list:
    if strategy == "rules":
        return [plan for plan, _ in by_rules(plans, problem, registry.arch)]
    ranking = by_model_or_rules(plans, problem, registry.arch, *shipped_model(registry.arch.name, problem))
    return [plan for plan, _ in ranking.ranked]


def evaluate(sweep: dict, preset: str, strategy: str = "rules") -> dict:
    registry = Registry("sm_90")
    kernels = [Kernel(cfg, registry.arch) for cfg in load_preset(preset)]
    auto, best, lines = [], [], []
    for row in sweep["rows"]:
        problem = GemmProblem(row["m"], row["n"], row["k"], dtype=row["dtype"], layout=row["layout"])
        ranked = [plan.label for plan in _ranked(strategy, registry, plans_of(kernels, problem), problem)
                  if plan.label in row["timings"]]
        if not ranked:
            continue
        times = {label: row["timings"][label]["ms"] for label in ranked}
        fastest = min(times.values())
        auto.append(row["cublas_ms"] / times[ranked[0]])
        best.append(row["cublas_ms"] / fastest)
        lines.append(f"{row['m']:>5}x{row['n']:>5}x{row['k']:>5} best {best[-1]:.2f} {strategy} {auto[-1]:.2f} "
                     f"({fastest / times[ranked[0]]:.2f} of best) {ranked[0]}")
    geo = lambda v: math.exp(sum(map(math.log, v)) / len(v))  # noqa: E731
    return {"auto_geomean": geo(auto), "best_geomean": geo(best), "lines": lines}


def main() -> None:
    strategy = sys.argv[3] if len(sys.argv) > 3 else "rules"
    result = evaluate(json.load(open(sys.argv[1])), sys.argv[2], strategy)
    print("\n".join(result["lines"]))
    print(f"best {result['best_geomean']:.3f}  {strategy} {result['auto_geomean']:.3f}")


if __name__ == "__main__":
    main()
