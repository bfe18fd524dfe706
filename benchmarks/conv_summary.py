"""The conv benchmark's acceptance (issue 4's targets per direction x category, the memory-bound checks), its
summary of a run's rows, and the merging of result files (a run split over device calls, or rows measured again
after a change). Used by benchmarks/conv.py; imports nothing heavy."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from protocol import geomean

DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
# Acceptance of issue 4: geomean of cuDNN_ms / tune_ms per direction x category
TARGETS = {"dense2d": {"fwd": 0.8, "bwd_data": 0.7, "bwd_weight": 0.7}, "grouped": 2.0, "depthwise": 1.5,
           "dense3d": 0.8, "grouped3d": 3.0, "depthwise3d": 3.0}
FLOOR_TARGET_PCT = 60.0          # memory-bound cases: % of the HBM copy bandwidth on min_bytes
# what two result files must share to be merged (GPU, versions, dtype, timing protocol)
ALIKE_KEYS = ("gpu", "tiledispatch", "triton", "torch", "cuda", "dtype", "protocol")


def target(category: str, direction: str) -> float:
    value = TARGETS[category]
    return value[direction] if isinstance(value, dict) else value


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    groups, acceptance = [], []
    for direction in DIRECTIONS:
        for category in TARGETS:
            sub = [r for r in rows if r["direction"] == direction and r["category"] == category]
            if not sub:
                continue
            tuned = [r for r in sub if r.get("tune_ratio")]
            worst = min(tuned, key=lambda r: r["tune_ratio"]) if tuned else None
            tune_gm = geomean([r["tune_ratio"] for r in tuned])
            groups.append({"direction": direction, "category": category, "rows": len(sub),
                           "tune_geomean": tune_gm, "auto_geomean": geomean([r.get("auto_ratio") for r in sub]),
                           "tune_min": worst["tune_ratio"] if worst else None,
                           "tune_min_case": worst["case"] if worst else None,
                           "tune_floor_pct_geomean": geomean([r.get("tune_floor_pct") for r in sub]),
                           "cudnn_floor_pct_geomean": geomean([r.get("cudnn_floor_pct") for r in sub]),
                           "ceiling_geomean": geomean([r.get("ceiling_ratio") for r in sub]),
                           "without_result": len(sub) - len(tuned),
                           "wrong_plans": sum(len(r.get("wrong", {})) for r in sub)})
            goal = target(category, direction)
            acceptance.append({"check": f"{category} ratio", "direction": direction, "target": goal,
                               "value": tune_gm, "ceiling": groups[-1]["ceiling_geomean"], "rows": len(tuned),
                               "of": len(sub),
                               "pass": bool(tune_gm is not None and tune_gm >= goal and len(tuned) == len(sub))})
        acceptance += memory_checks(rows, direction)
    return {"groups": groups, "acceptance": acceptance}


def memory_checks(rows: list[dict[str, Any]], direction: str) -> list[dict[str, Any]]:
    """Memory-bound cases (depthwise, grouped <= 16 ch/group): geomean % of the copy bandwidth, per ndim."""
    out = []
    for dims, suffix in ((False, "2D"), (True, "3D")):
        sub = [r for r in rows if r["direction"] == direction and r["memory_bound"]
               and r["category"].endswith("3d") == dims]
        if not sub:
            continue
        pct = [r.get("tune_floor_pct") for r in sub]
        value = geomean(pct)
        meeting = sum(1 for p in pct if p is not None and p >= FLOOR_TARGET_PCT)
        worst = min((r for r in sub if r.get("tune_floor_pct")), key=lambda r: r["tune_floor_pct"], default=None)
        copy_pct = geomean([100.0 * r["copy_ms"] / r["tune_ms"] for r in sub
                            if r.get("copy_ms") and r.get("tune_ms")])
        out.append({"check": f"memory-bound {suffix} % of HBM", "direction": direction, "target": FLOOR_TARGET_PCT,
                    "value": value, "rows": sum(p is not None for p in pct), "of": len(sub),
                    "copy_floor_pct": geomean([r.get("copy_floor_pct") for r in sub]), "copy_speed_pct": copy_pct,
                    "cases_meeting": meeting, "worst_case": worst["case"] if worst else None,
                    "worst_pct": worst["tune_floor_pct"] if worst else None,
                    "pass": bool(value is not None and value >= FLOOR_TARGET_PCT)})
    return out


def print_acceptance(summary: dict[str, Any]) -> None:
    fmt = lambda v, unit: "-" if v is None else (f"{v:.1f}%" if unit == "%" else f"{v:.2f}x")
    print("\nacceptance (tune geomean vs cuDNN; memory-bound: geomean % of the HBM copy bandwidth)")
    for a in summary["acceptance"]:
        unit = "%" if a["check"].startswith("memory") else "x"
        extra = f", {a['cases_meeting']}/{a['of']} cases >= {FLOOR_TARGET_PCT:g}%" if "cases_meeting" in a else ""
        if a.get("ceiling"):
            extra += f", at copy speed {a['ceiling']:.2f}x"
        if a.get("copy_floor_pct"):
            extra += f", a copy of the same bytes {a['copy_floor_pct']:.0f}%"
        print(f"  {a['direction']:<10} {a['check']:<26} {fmt(a['value'], unit):>8}  target {fmt(a['target'], unit):>7}"
              f"  {'PASS' if a['pass'] else 'FAIL'}  ({a['rows']}/{a['of']} rows{extra})")


def merge_results(paths: list[Path], replace_why: str | None = None) -> dict[str, Any]:
    """One result from runs of the same GPU and versions over disjoint (direction, layer) rows (a benchmark split
    over several calls): the first run's header, every row, the summary recomputed, the seconds summed. With
    `replace_why`, the rows of each later run replace the same rows of the earlier ones instead (rows measured
    again after a change), and each such run is recorded in `reruns` with that reason."""
    import json

    runs = [json.loads(p.read_text()) for p in paths]
    for path, run in zip(paths[1:], runs[1:]):
        bad = [k for k in ALIKE_KEYS if run.get(k) != runs[0].get(k)]
        if bad:
            raise SystemExit(f"{path}: {', '.join(bad)} differ from {paths[0]}; only runs alike merge")
    if replace_why is not None:
        return _replace_rows(runs, replace_why)
    rows = [row for run in runs for row in run["rows"]]
    seen = [(r["direction"], r["case"]) for r in rows]
    if len(set(seen)) != len(seen):
        raise SystemExit("the runs share (direction, layer) rows; merge disjoint runs")
    merged = {**runs[0], "rows": rows, "summary": summarize(rows), "seconds": sum(r["seconds"] for r in runs),
              "argv": [run.get("argv") for run in runs],
              "builds": {k: v for r in runs for k, v in r["builds"].items()}}
    merged["suites"] = sorted({s for run in runs for s in run["suites"]})
    return merged


def _replace_rows(runs: list[dict[str, Any]], why: str) -> dict[str, Any]:
    base = dict(runs[0])
    rows = {(r["direction"], r["case"]): r for r in base["rows"]}
    reruns = list(base.get("reruns", []))
    for run in runs[1:]:
        rows.update({(r["direction"], r["case"]): r for r in run["rows"]})
        reruns.append({"date": run.get("date"), "rows": len(run["rows"]), "argv": run.get("argv") or [],
                       "why": why})
    merged = list(rows.values())
    return {**base, "rows": merged, "summary": summarize(merged), "reruns": reruns}
