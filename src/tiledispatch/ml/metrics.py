"""How good a ranking is, per problem: efficiency = best time / time of the pick (1 = the oracle's kernel).

A strategy scores every candidate of a problem (lower is better); its top-1 pick is the lowest score (ties:
the first row), its top-k pick the fastest of its k lowest scores (what `tune` confirming the top k keeps).
"""
from __future__ import annotations

import math
from typing import Any

HIT_TOLERANCE = 1e-9   # a pick "hits" when its time equals the best time (relative)


def per_problem(problems, times, scores, k: int = 5):
    """One row per problem (sorted): n candidates, best time, the top-1 pick (row label and time), the best
    time among the top k, efficiency of both, and whether each pick is the best kernel."""
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame({"problem": np.asarray(problems), "time": np.asarray(times, dtype=np.float64),
                          "score": np.asarray(scores, dtype=np.float64)})
    frame["row"] = np.arange(len(frame))
    if not len(frame):
        return pd.DataFrame(columns=["problem", "n", "best", "pick_row", "pick_time", "topk_time", "eff",
                                     "eff_topk", "hit", "hit_topk"])
    ranked = frame.sort_values(["problem", "score", "row"], kind="stable")
    grouped = ranked.groupby("problem", sort=True)
    first = grouped.head(1).set_index("problem")
    table = pd.DataFrame({"n": grouped.size(), "best": grouped["time"].min()})
    table["pick_row"], table["pick_time"] = first["row"], first["time"]
    table["topk_time"] = grouped.head(k).groupby("problem", sort=True)["time"].min()
    table["eff"] = table["best"] / table["pick_time"]
    table["eff_topk"] = table["best"] / table["topk_time"]
    table["hit"] = table["pick_time"] <= table["best"] * (1 + HIT_TOLERANCE)
    table["hit_topk"] = table["topk_time"] <= table["best"] * (1 + HIT_TOLERANCE)
    return table.rename_axis("problem").reset_index()


def distribution(values) -> dict[str, float]:
    """mean, median, P10 and P90 of finite values (NaN when there are none) and their count."""
    import numpy as np

    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    if not len(arr):
        return {"count": 0, "mean": math.nan, "median": math.nan, "p10": math.nan, "p90": math.nan}
    return {"count": len(arr), "mean": float(arr.mean()), "median": float(np.median(arr)),
            "p10": float(np.quantile(arr, 0.1)), "p90": float(np.quantile(arr, 0.9))}


def summary(table) -> dict[str, Any]:
    """The efficiency distribution of the top-1 and top-k picks and both hit rates of a per_problem table."""
    count = len(table)
    return {**distribution(table["eff"]), "topk": distribution(table["eff_topk"]),
            "top1_hit": float(table["hit"].mean()) if count else math.nan,
            "topk_hit": float(table["hit_topk"].mean()) if count else math.nan}


def mean_efficiency(problems, times, scores) -> float:
    """Mean top-1 efficiency (the number cross-validation compares)."""
    table = per_problem(problems, times, scores)
    return float(table["eff"].mean()) if len(table) else math.nan
