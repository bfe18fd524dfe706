"""How well the shipped GEMM cost models (trained on rcr sweeps only) rank other layouts, from the H200
candidate sweeps that timed every `_candidates` kernel per shape (benchmarks/results/sweeps/sweep_*_h200.json,
`benchmarks/gemm.py --full-matrix`; screened kernels carry their 3-sample estimate).

Per sweep file: efficiency = fastest kernel / the pick, mean / median / P10 / worst over its shapes, for the
model's top-1, its top 3 timed (unsure -> measure) and the rules' top-1, ranking exactly the kernels the
sweep timed through selector.by_model_or_rules.

    python tools/gemm_layout_transfer.py [--out benchmarks/results/ml/gemm_layout_transfer_h200.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from rank_space import distribution  # noqa: E402  benchmarks/rank_space.py (mean / median / P10 / worst)
SWEEPS = ("sweep_bf16_rcr_h200", "sweep_bf16_rrr_h200", "sweep_fp16_rcr_h200", "sweep_fp16_rrr_h200")


def evaluate(path: Path) -> dict[str, Any]:
    import tiledispatch as td
    from tiledispatch.select import cost_model
    from tiledispatch.select.selector import by_model_or_rules

    data = json.loads(path.read_text())
    eff: dict[str, list[float]] = {"model": [], "model_top3": [], "rules": []}
    for row in data["rows"]:
        problem = td.GemmProblem(row["m"], row["n"], row["k"], dtype=row["dtype"], layout=row["layout"])
        registry = td.Registry(td.get_arch("sm_90"))
        preset = f"gemm_{row['dtype']}_{row['layout']}_candidates"
        registry.add_preset(preset, problem.epilogue, on_demand=True)
        times = {label: t["ms"] for label, t in row["timings"].items() if t.get("ms")}
        plans = [plan for plan in registry.space_plans(problem) if plan.label in times]
        model, why = cost_model.shipped_model("sm_90", problem)
        ranking = by_model_or_rules(plans, problem, registry.arch, model, why)
        ranked = [plan.label for plan, _ in ranking.ranked]
        rules = by_model_or_rules(plans, problem, registry.arch, None, "rules").ranked[0][0].label
        best = min(times[label] for label in ranked)
        eff["model"].append(best / times[ranked[0]])
        eff["model_top3"].append(best / min(times[label] for label in ranked[:3]))
        eff["rules"].append(best / times[rules])
    return {"gpu": data["gpu"], "shapes": len(data["rows"]),
            "efficiency": {k: distribution(v) for k, v in eff.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = {name: evaluate(ROOT / "benchmarks" / "results" / "sweeps" / f"{name}.json") for name in SWEEPS}
    for name, result in out.items():
        print(name, result["shapes"], json.dumps({k: {m: round(v, 3) for m, v in d.items()}
                                                   for k, d in result["efficiency"].items()}))
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
