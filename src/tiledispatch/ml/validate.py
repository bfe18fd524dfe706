"""`validate(model_dir, data_dir)`: how the model ranks kernels on the problems held out from its training.

Per held-out problem present in the data, candidates are its kernels with status ok (a kernel that cannot run
the problem is never a candidate) and efficiency = best time / time of the pick, for
  model       the model's top-1;
  model_top5  the fastest of the model's 5 best (`tune` confirming the top 5);
  rules       the `rules` strategy's top-1 (its estimate over the same candidates, padding included);
  vendor      the vendor library (cuBLAS / cuDNN) where the data times it: best kernel time / vendor time
              (above 1 where the vendor is faster than every kernel; `vendor_faster` counts those problems).
Reported: mean, median, P10, P90 efficiency, top-1 / top-5 hit rates, the 10 worst problems of the model, and
optionally a CDF plot of model vs rules.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tiledispatch.bench.dataset import Dataset
from tiledispatch.bench.schema import VENDOR_FAMILY
from tiledispatch.errors import BadInput
from tiledispatch.ml import metrics
from tiledispatch.ml.features import feature_frame
from tiledispatch.ml.model import CostModel, ModelMismatch, read_meta
from tiledispatch.ml.train import data_arch, data_hash, kernel_rows

TOP_K = 5
WORST = 10


def evaluate(rows, model_scores, rules_scores, vendor_ms=None) -> dict[str, Any]:
    """The metrics of validate on candidate rows (columns problem, kernel, time_ms; tag optional), the
    model's and the rules' lower-is-better scores of each row, and the vendor time per problem (optional)."""
    import numpy as np

    problems, times = rows["problem"].to_numpy(), rows["time_ms"].to_numpy(dtype=float)
    model = metrics.per_problem(problems, times, model_scores, k=TOP_K)
    rules = metrics.per_problem(problems, times, rules_scores, k=TOP_K)
    kernels = rows["kernel"].to_numpy()
    report: dict[str, Any] = {
        "problems": len(model), "candidates": {"mean": float(model["n"].mean()) if len(model) else math.nan,
                                               "min": int(model["n"].min()) if len(model) else 0,
                                               "max": int(model["n"].max()) if len(model) else 0},
        "strategies": {"model": _strategy(model["eff"], model["hit"]),
                       "model_top5": _strategy(model["eff_topk"], model["hit_topk"]),
                       "rules": _strategy(rules["eff"], rules["hit"]),
                       "rules_top5": _strategy(rules["eff_topk"], rules["hit_topk"])},
    }
    vendor = _vendor(model, vendor_ms or {})
    if len(vendor):
        report["strategies"]["vendor"] = {**metrics.distribution(vendor), "hit": math.nan,
                                          "vendor_faster": int(np.sum(vendor > 1))}
    report["worst"] = _worst(model, rows, kernels)
    report["efficiency"] = {"model": model["eff"].tolist(), "rules": rules["eff"].tolist(),
                            "model_top5": model["eff_topk"].tolist()}
    return report


def _strategy(eff, hit) -> dict[str, Any]:
    return {**metrics.distribution(eff), "hit": float(hit.mean()) if len(hit) else math.nan}


def _vendor(table, vendor_ms: dict[str, float]):
    import numpy as np

    pairs = [(best, vendor_ms.get(p)) for p, best in zip(table["problem"], table["best"])]
    return np.array([best / v for best, v in pairs if v is not None and math.isfinite(v) and v > 0])


def _worst(table, rows, kernels) -> list[dict[str, Any]]:
    tags = rows["tag"].to_numpy() if "tag" in rows.columns else None
    ordered = table.sort_values(["eff", "problem"], kind="stable").head(WORST)
    best_rows = rows.reset_index(drop=True).groupby("problem")["time_ms"].idxmin()
    out = []
    for r in ordered.to_dict("records"):
        pick = int(r["pick_row"])
        out.append({"problem": r["problem"], "tag": "" if tags is None else str(tags[pick]),
                    "picked": str(kernels[pick]), "picked_ms": float(r["pick_time"]),
                    "best": str(kernels[int(best_rows[r["problem"]])]), "best_ms": float(r["best"]),
                    "efficiency": float(r["eff"]), "efficiency_top5": float(r["eff_topk"])})
    return out


def validate(model_dir: str | Path, data_dir: str | Path, plot: str | Path | None = None) -> dict[str, Any]:
    """Score the model's held-out problems in `data_dir` (see the module docstring); `plot`: a PNG path."""
    meta = read_meta(model_dir)
    dataset = Dataset(data_dir)
    manifest = dataset.manifest()
    for field in ("op", "direction", "dtype"):
        if str(manifest.get(field)) != str(meta.get(field)):
            raise BadInput(f"the data in {data_dir} is {field} {manifest.get(field)!r}; the model in "
                           f"{model_dir} is {meta.get(field)!r}", field=field)
    frame = dataset.frame()
    arch = data_arch(kernel_rows(frame))
    if arch.name != meta["arch"]:
        raise ModelMismatch(f"the data in {data_dir} was measured on {arch.name}; the model is for "
                            f"{meta['arch']}")
    model = CostModel.load(model_dir, arch)
    held_out = set(meta["holdout"]["problems"])
    rows = kernel_rows(frame)
    rows = rows[rows["problem"].isin(held_out)].reset_index(drop=True)
    if rows.empty:
        raise BadInput(f"the data in {data_dir} holds none of the model's {len(held_out)} held-out problems "
                       "(with an ok kernel)", field="data")
    features = feature_frame(rows, arch)
    vendor = _vendor_times(frame, held_out)
    report = evaluate(rows, model.scores_of(features.to_numpy()), features["rules_log_us"].to_numpy(), vendor)
    report.update(model={"dir": str(model_dir), "kind": model.kind, "arch": meta["arch"], "op": meta["op"],
                         "direction": meta["direction"], "dtype": meta["dtype"],
                         "trained_on": meta.get("trained_on"), "data_hash": meta["data"]["hash"]},
                  data={"dir": str(data_dir), "hash": data_hash(data_dir),
                        "held_out_in_model": len(held_out)})
    report["data"]["same_as_training"] = report["data"]["hash"] == meta["data"]["hash"]
    report["plot"] = str(plot) if plot is not None else None
    if plot is not None:
        plot_cdf(report, plot)
    return report


def _vendor_times(frame, problems: set[str]) -> dict[str, float]:
    import numpy as np

    times = frame["time_ms"].astype(float)
    vendor = frame[(frame["family"] == VENDOR_FAMILY) & (frame["status"] == "ok") & np.isfinite(times)
                   & (times > 0) & frame["problem"].isin(problems)]
    return {str(p): float(t) for p, t in vendor.groupby("problem")["time_ms"].min().items()}


def plot_cdf(report: dict[str, Any], path: str | Path) -> Path:
    """The efficiency CDF of model, model top-5 and rules over the held-out problems: a PNG (Agg canvas)."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    series = (("model", "model top-1"), ("model_top5", f"model top-{TOP_K} confirmed"),
              ("rules", "rules top-1"))
    for key, label in series:
        values = np.sort(np.asarray(report["efficiency"][key], dtype=float))
        if len(values):
            share = np.arange(1, len(values) + 1) / len(values)
            mean = report["strategies"][key]["mean"]
            ax.step(values, share, where="post", label=f"{label} (mean {mean:.3f})")
    m = report["model"]
    ax.set_xlabel("efficiency (best time / time of the pick)")
    ax.set_ylabel("share of problems with efficiency <= x")
    ax.set_title(f"{m['op']} {m['direction']} {m['dtype']} {m['arch']}: "
                 f"{report['problems']} held-out problems")
    ax.set_xlim(0, 1.01)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out
