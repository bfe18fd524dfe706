"""Offline check of the `rules` strategy against a full-matrix sweep: for every shape of the sweep, the plan the
rules pick among a preset's instances (direct or exactly padded) and its measured time, relative to cuBLAS
and to the best instance of the preset. Usage: python tools/rules_offline.py SWEEP.json PRESET"""
from __future__ import annotations

import json
import math
import sys

from tiledispatch.arch import get_arch
from tiledispatch.presets import load_preset
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.select import rules


def evaluate(sweep: dict, preset: str) -> dict:
    arch = get_arch("sm_90")
    configs = load_preset(preset)
    auto, best, lines = [], [], []
    for row in sweep["rows"]:
        problem = GemmProblem(row["m"], row["n"], row["k"], dtype=row["dtype"], layout=row["layout"])
        padded = problem.padded16()
        scored = []
        for cfg in configs:
            for prob, pad, label in ((problem, False, cfg.name), (padded, True, cfg.name + " (padded)")):
                if label not in row["timings"] or (cfg.align > prob.align):
                    continue
                est = rules.estimate_us(cfg, prob, arch) + (rules.padding_us(problem, arch) if pad else 0.0)
                scored.append((est, row["timings"][label]["ms"], label))
        if not scored:
            continue
        pick = min(scored)
        fastest = min(t for _, t, _ in scored)
        auto.append(row["cublas_ms"] / pick[1])
        best.append(row["cublas_ms"] / fastest)
        lines.append(f"{row['m']:>5}x{row['n']:>5}x{row['k']:>5} best {best[-1]:.2f} rules {auto[-1]:.2f} "
                     f"({fastest / pick[1]:.2f} of best) {pick[2][5:60]}")
    geo = lambda v: math.exp(sum(map(math.log, v)) / len(v))  # noqa: E731
    return {"auto_geomean": geo(auto), "best_geomean": geo(best), "lines": lines}


def main() -> None:
    result = evaluate(json.load(open(sys.argv[1])), sys.argv[2])
    print("\n".join(result["lines"]))
    print(f"best {result['best_geomean']:.3f}  rules {result['auto_geomean']:.3f}")


if __name__ == "__main__":
    main()
