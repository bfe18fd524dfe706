"""Rank the unseen zoo's measured plans with a cost model, on the CPU (issue 36).

`benchmarks/rank_space.py --keep-times` stores, per zoo problem, the GPU time of every plan of the key's space
(`_all` / `_candidates`, the essential preset, the vendor). This tool ranks those plans with a model directory
(default: the key's shipped model) through `selector.by_model_or_rules`, as `auto` does, and reports per key
mean / median / P10 / worst of efficiency = fastest plan of ours / time of the pick, for
  space / space_top3 / space_top5   the model's top-1 over the whole space (`auto` with the space ranked),
      and the fastest of its top 3 / 5 (unsure -> measure times 3 for GEMM, 5 for conv);
  essential / essential_top5   the same over the essential preset alone (`auto` by default);
  rules   the rules' top-1.
--check: the picks must equal the rows' `model_pick` (the ranking reproduces the GPU run), else exit 1.
--worst N: also list per key the N problems of lowest top-1 efficiency, with the pick and the fastest plan.

    python tools/zoo_offline.py RESULTS.json [RESULTS.json ...] [--model KEY=DIR ...] [--check]
        [--worst N] [--zoo benchmarks/zoo/unseen_zoo.json] [--out PATH]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from rank_space import declare_oracle, distribution, read_json  # noqa: E402  benchmarks/rank_space.py


def zoo_problems(path: Path) -> dict[str, Any]:
    """Every problem of an unseen-zoo file (tools/zoo_corpus.py) by signature (the rows name them so)."""
    import tiledispatch as td

    zoo = json.loads(path.read_text())
    problems = [td.GemmProblem.from_dict(e["problem"]) for e in zoo["gemm"]]
    problems += [td.ConvProblem.from_dict(e["problem"]) for entries in zoo["conv"].values() for e in entries]
    return {p.signature(): p for p in problems}


def registry_for(problem: Any) -> tuple[Any, set[str]]:
    """The plans rank_space.py's oracle timed (rank_space.declare_oracle), declared on demand (nothing is
    built); and the names of the essential preset's kernels."""
    import tiledispatch as td

    registry = td.Registry(td.get_arch("sm_90"))
    essential = declare_oracle(registry, problem, on_demand=True)
    return registry, essential


def picks(problem: Any, times: dict[str, float], registry: Any, essential: set[str], model: Any
          ) -> dict[str, Any]:
    """The model's top-1 / 3 / 5 over the timed plans of `problem`, its top-1 / 5 over the essential ones,
    the rules' top-1, and the model's top-1 over the whole space when the run did not time it (a kernel
    added to the space after the run: the pick over the timed plans is then not what `auto` would run)."""
    from tiledispatch.select.selector import by_model_or_rules, is_vendor

    space = [p for p in registry.space_plans(problem) if not is_vendor(p)]
    plans = [p for p in space if p.label in times]
    ranked = [plan.label for plan, _ in by_model_or_rules(plans, problem, registry.arch, model).ranked]
    untimed = [p for p in space if p.label not in times]
    top = by_model_or_rules(space, problem, registry.arch, model).ranked[0][0].label if untimed else ranked[0]
    ess = by_model_or_rules([p for p in plans if p.kernel.name in essential], problem, registry.arch, model)
    ess_ranked = [plan.label for plan, _ in ess.ranked]
    rules = by_model_or_rules(plans, problem, registry.arch, None, "rules").ranked[0][0].label
    return {"pick": ranked[0], "top3": ranked[:3], "top5": ranked[:5], "rules": rules,
            "essential": ess_ranked[:5], "untimed_top1": None if top in times else top}


def evaluate(rows: list[dict[str, Any]], problems: dict[str, Any], model: Any, check: bool,
             worst: int = 0) -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    eff: dict[str, list[float]] = {"space": [], "space_top3": [], "space_top5": [], "rules": [],
                                   "essential": [], "essential_top5": []}
    mismatches, untimed, registry, essential, key = 0, 0, None, set(), None
    for row in rows:
        times = row["times"]
        problem = problems[row["problem"]]
        if registry is None or key != problem.signature().split(":")[:3]:
            (registry, essential), key = registry_for(problem), problem.signature().split(":")[:3]
        chosen = picks(problem, times, registry, essential, model)
        fastest = min((ms, label) for label, ms in times.items() if not label.startswith("vendor"))
        best = fastest[0]
        eff["space"].append(best / times[chosen["pick"]])
        cases.append({"problem": row["problem"], "efficiency": round(eff["space"][-1], 4),
                      "pick": chosen["pick"], "pick_ms": times[chosen["pick"]],
                      "fastest": fastest[1], "fastest_ms": best,
                      **({"untimed_top1": chosen["untimed_top1"]} if chosen["untimed_top1"] else {})})
        untimed += chosen["untimed_top1"] is not None
        eff["space_top3"].append(best / min(times[label] for label in chosen["top3"]))
        eff["space_top5"].append(best / min(times[label] for label in chosen["top5"]))
        eff["rules"].append(best / times[chosen["rules"]])
        if chosen["essential"]:
            eff["essential"].append(best / times[chosen["essential"][0]])
            eff["essential_top5"].append(best / min(times[label] for label in chosen["essential"]))
        mismatches += check and chosen["pick"] != row["model_pick"]
    timed_top1 = [e for e, c in zip(eff["space"], cases) if "untimed_top1" not in c]   # unrounded
    return {"problems": len(rows), "efficiency": {k: distribution(v) for k, v in eff.items()},
            "untimed_top1": untimed,
            **({"space_where_top1_timed": distribution(timed_top1)} if untimed and timed_top1 else {}),
            **({"picks_unlike_the_gpu_run": mismatches} if check else {}),
            **({"worst": sorted(cases, key=lambda c: c["efficiency"])[:worst]} if worst else {})}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--model", action="append", default=[],
                        help="KEY=DIR: rank key KEY (e.g. conv_fwd_bf16) with the model in DIR")
    parser.add_argument("--check", action="store_true",
                        help="the picks must equal the rows' model_pick (the model the run used)")
    parser.add_argument("--zoo", type=Path, default=ROOT / "benchmarks" / "zoo" / "unseen_zoo.json")
    parser.add_argument("--worst", type=int, default=0, help="list the N worst top-1 picks per key")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from tiledispatch.ml.model import CostModel
    from tiledispatch.select import cost_model

    dirs = dict(item.split("=", 1) for item in args.model)
    problems = zoo_problems(args.zoo)
    out: dict[str, Any] = {"results": [str(p) for p in args.results], "models": dirs, "keys": {}}
    failed = False
    for path in args.results:
        for name, result in read_json(path)["results"].items():
            rows = [row for row in result["rows"] if "times" in row]
            if not rows:
                continue
            model_key = cost_model.model_key(problems[rows[0]["problem"]])
            folder = Path(dirs.get(model_key, cost_model.model_dir("sm_90", model_key)))
            model = CostModel.load(folder, arch="sm_90")
            summary = evaluate(rows, problems, model, args.check, args.worst)
            summary["model"] = {"dir": str(folder), "kernel_kinds": model.meta["kernel_kinds"]}
            out["keys"][name] = summary
            failed |= bool(summary.get("picks_unlike_the_gpu_run"))
            print(name, json.dumps({k: {m: round(v, 3) for m, v in d.items()}
                                    for k, d in summary["efficiency"].items()}),
                  f"untimed top-1 {summary['untimed_top1']}", summary.get("picks_unlike_the_gpu_run", ""),
                  flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
