"""Offline study: could a model of the vendor's speed skip the first call's compiles where cuDNN wins by far?
Per conv direction it fits a LightGBM regressor of log(our best time / cuDNN's time) on problem features, from
the H200 datasets (data/h200/conv_<direction>_bf16: every problem's best plan of ours and its cuDNN row), and
scores the gate "take the vendor's plan without compiling ours when the prediction says it is T times faster"
on the unseen zoo's GPU timings (benchmarks/results/zoo/*_times.json.gz, `eff_vendor`), which no model
trained on. Reported per zoo key and T: the share of problems gated (compiles skipped) and, over all of the
key's problems, the efficiency against the oracle of ours and the vendor when the gated ones take the vendor's
plan and the others are counted at the oracle (so only the gate's own loss shows), with the worst gated case.

    python tools/vendor_gate_offline.py TIMES.json.gz [...] [--quantile 0.1] [--json PATH]
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "h200"
ZOO = ROOT / "benchmarks" / "zoo" / "unseen_zoo.json"
THRESHOLDS = (1.1, 1.25, 1.5)
PARAMS = {"objective": "l2", "learning_rate": 0.05, "num_leaves": 31, "min_data_in_leaf": 10,
          "feature_fraction": 0.9, "verbose": -1, "seed": 0, "num_threads": 2}
ROUNDS = 400


def features(problem: Any) -> list[float]:
    """Problem-level features (no kernel): sizes in log2, the filter and stride, depthwise and alignment."""
    lg = math.log2
    spatial, out, filt = math.prod(problem.spatial), math.prod(problem.output), math.prod(problem.filter)
    cpg, kpg = problem.c // problem.groups, problem.k // problem.groups
    return [lg(problem.n), lg(problem.c), lg(problem.k), lg(problem.groups), lg(cpg), lg(kpg), lg(spatial),
            lg(out), lg(filt), max(problem.filter), min(problem.filter), math.prod(problem.stride),
            math.prod(problem.dilation), problem.ndim, problem.align, float(cpg == 1 and kpg <= 2),
            lg(max(problem.flops, 1)), lg(max(problem.min_bytes, 1)),
            lg(max(problem.flops, 1) / max(problem.min_bytes, 1)), lg(problem.n * out)]


def training_rows(direction: str) -> tuple[list[list[float]], list[float]]:
    """(features, log(best ours / vendor)) of every dataset problem where both ran."""
    import tiledispatch as td
    from tiledispatch.bench.dataset import load_frame

    df = load_frame(DATA / f"conv_{direction}_bf16")
    ok = df[df["status"] == "ok"]
    vendor = ok[ok["family"] == "vendor"].set_index("problem")["time_ms"]
    ours = ok[ok["family"] != "vendor"].groupby("problem")["time_ms"].min()
    js = df.drop_duplicates("problem").set_index("problem")["problem_json"]
    x, y = [], []
    for sig in sorted(set(vendor.index) & set(ours.index)):
        x.append(features(td.ConvProblem.from_dict(json.loads(js[sig]))))
        y.append(math.log(ours[sig] / vendor[sig]))
    return x, y


def fit(x: list[list[float]], y: list[float], quantile: float | None = None) -> Any:
    """The regressor of the mean (l2), or of a lower quantile of the vendor's advantage (a cautious gate)."""
    import lightgbm as lgb
    import numpy as np

    params = dict(PARAMS) if quantile is None else {**PARAMS, "objective": "quantile", "alpha": quantile}
    return lgb.train(params, lgb.Dataset(np.asarray(x), label=np.asarray(y)), num_boost_round=ROUNDS)


def zoo_rows(paths: list[Path]) -> dict[str, list[tuple[str, float]]]:
    """Per conv zoo key, (signature, eff_vendor) of each timed problem; a later file replaces a key."""
    from zoo_vendor_share import vendor_ratios   # tools/ is the script's directory

    rows: dict[str, list[tuple[str, float]]] = {}
    for path in paths:
        for key, result in json.loads(gzip.open(path).read())["results"].items():
            if key.startswith("conv_"):
                rows[key] = vendor_ratios(result)
    return rows


def score(model: Any, problems: dict[str, Any], rows: list[tuple[str, float]]) -> dict[str, Any]:
    import numpy as np

    predicted = model.predict(np.asarray([features(problems[sig]) for sig, _ in rows]))
    actual = [math.log(r) for _, r in rows]
    out: dict[str, Any] = {"problems": len(rows), "rmse_log": math.sqrt(statistics.fmean(
        (p - a) ** 2 for p, a in zip(predicted, actual))), "gates": {}}
    for t in THRESHOLDS:
        gated = [r for (_, r), p in zip(rows, predicted) if p > math.log(t)]
        effs = [min(1.0, r) for r in gated]       # the vendor's plan against min(ours, vendor)
        total = (sum(effs) + len(rows) - len(gated)) / len(rows)
        out["gates"][str(t)] = {"gated": len(gated), "share": len(gated) / len(rows), "mean_eff_all": total,
                                "gated_mean_eff": statistics.fmean(effs) if effs else None,
                                "gated_worst_eff": min(effs) if effs else None,
                                "gated_vendor_slower": sum(r < 1 for r in gated)}
    return out


def _rounded(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("times", nargs="+", type=Path)
    ap.add_argument("--quantile", type=float, help="gate on this lower quantile of the prediction (e.g. 0.1)")
    ap.add_argument("--json")
    opts = ap.parse_args()
    from zoo_offline import zoo_problems   # tools/ is the script's directory

    problems = zoo_problems(ZOO)
    rows = zoo_rows(opts.times)
    result: dict[str, Any] = {"thresholds": THRESHOLDS, "params": PARAMS, "rounds": ROUNDS,
                              "quantile": opts.quantile, "keys": {}}
    for direction in ("fwd", "bwd_data", "bwd_weight"):
        x, y = training_rows(direction)
        model = fit(x, y, opts.quantile)
        for key in sorted(k for k in rows if k.startswith(f"conv_{direction}_")):
            row = score(model, problems, rows[key])
            row["training_problems"] = len(y)
            result["keys"][key] = row
            gates = "  ".join(f"T{t}: {g['share']:5.1%} gated, all {g['mean_eff_all']:.3f}, worst "
                              f"{_rounded(g['gated_worst_eff'])}" for t, g in row["gates"].items())
            print(f"{key:36s} n={row['problems']:3d} rmse(log) {row['rmse_log']:.3f}  {gates}", flush=True)
    if opts.json:
        Path(opts.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
