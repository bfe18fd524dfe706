"""What a sweep dataset holds (`summary`) and what its best kernels are (`oracle`), on a pandas DataFrame.

Only rows with status `ok` and a finite, positive `time_ms` count as timings. Vendor rows (family `vendor`,
e.g. kernel `vendor:cublas`) are the reference: they never count as kernels, never win the oracle, and only
give the vendor time the oracle is compared against. Pure pandas, no GPU; pandas is imported inside the
functions. Every number returned is a plain Python int / float / str (JSON-ready); a missing value is NaN (or
None in dicts).
"""
from __future__ import annotations

import math
from typing import Any

from tiledispatch.bench.schema import STATUSES, VENDOR_FAMILY
from tiledispatch.errors import BadInput

REQUIRED = ("problem", "tag", "kernel", "family", "status", "time_ms")
OPTIONAL = ("op", "direction", "dtype", "tflops", "gbps", "gpu", "arch", "timestamp")
VERSION_COLUMNS = ("tiledispatch", "triton", "torch", "cuda")
MAX_EXAMPLES = 10
TOP_BEST = 10
ORACLE_COLUMNS = ("problem", "tag", "n_ok", "best_kernel", "best_ms", "best_tflops", "best_gbps",
                  "second_kernel", "second_ms", "second_ratio", "median_ms", "median_ratio", "vendor_kernel",
                  "vendor_ms", "vendor_speedup")


# -- common ---------------------------------------------------------------------------------------
def _checked(df):
    """`df` with every column this module reads (an empty frame may have none; a non-empty one must)."""
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing and len(df):
        raise BadInput(f"the dataset rows lack the column(s) {missing}; expected the schema of "
                       "tiledispatch.bench.schema", field=missing[0])
    df = df.copy()
    for column in REQUIRED + OPTIONAL + VERSION_COLUMNS:
        if column not in df.columns:
            df[column] = None
    df["time_ms"] = df["time_ms"].astype(float)
    return df


def _is_vendor(df):
    return df["family"] == VENDOR_FAMILY


def _timed(df, vendor: bool):
    """The rows that are timings: status ok, finite positive time; vendor rows or kernel rows only."""
    import numpy as np

    good = (df["status"] == "ok") & np.isfinite(df["time_ms"]) & (df["time_ms"] > 0)
    return df[good & (_is_vendor(df) == vendor)]


def _fastest_per_pair(timed):
    """One row per (problem, kernel): its fastest timing (a clean dataset has one row per pair anyway)."""
    ordered = timed.sort_values(["problem", "time_ms", "kernel"], kind="stable")
    return ordered.drop_duplicates(["problem", "kernel"], keep="first")


def geomean(values) -> float:
    """Geometric mean of the finite positive values; NaN when there are none."""
    logs = [math.log(float(v)) for v in values if v is not None and math.isfinite(float(v)) and float(v) > 0]
    return math.exp(sum(logs) / len(logs)) if logs else math.nan


def _uniques(series) -> list[str]:
    return sorted({str(v) for v in series.dropna().tolist() if str(v) != ""})


# -- summary --------------------------------------------------------------------------------------
def summary(df) -> dict[str, Any]:
    """Counts of a dataset: rows (by status and per family), problems, kernels, coverage, failures, stamps."""
    df = _checked(df)
    kernels = df[~_is_vendor(df)]
    n_problems, n_kernels = int(df["problem"].nunique()), int(kernels["kernel"].nunique())
    expected = n_problems * n_kernels
    present = len(kernels[["problem", "kernel"]].drop_duplicates())
    ok_pairs = len(_timed(df, vendor=False)[["problem", "kernel"]].drop_duplicates())
    with_ok = set(_timed(df, vendor=False)["problem"])
    without_ok = sorted(set(df["problem"]) - with_ok)
    return {
        "rows": len(df), "by_status": _status_counts(df["status"]), "problems": n_problems,
        "kernels": n_kernels, "vendor_rows": int(_is_vendor(df).sum()),
        "ops": _uniques(df["op"]), "directions": _uniques(df["direction"]), "dtypes": _uniques(df["dtype"]),
        "pairs_expected": expected, "pairs_present": present, "coverage": _share(present, expected),
        "ok_pairs": ok_pairs, "ok_share": _share(ok_pairs, expected),
        "problems_with_ok": len(with_ok),
        "problems_without_ok": {"count": len(without_ok), "examples": without_ok[:MAX_EXAMPLES]},
        "by_family": _family_counts(df), "gpus": _uniques(df["gpu"]), "archs": _uniques(df["arch"]),
        "versions": {c: _uniques(df[c]) for c in VERSION_COLUMNS},
        "time_range": _time_range(df["timestamp"]), "duplicate_pairs": duplicate_pairs(df),
    }


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _status_counts(statuses) -> dict[str, int]:
    """Every known status (zeros included), then any unknown one found in the data."""
    counts = {str(k): int(v) for k, v in statuses.value_counts().items()}
    known = {s: counts.pop(s, 0) for s in STATUSES}
    return {**known, **dict(sorted(counts.items()))}


def _family_counts(df) -> dict[str, dict[str, int]]:
    families = df["family"].fillna("?").astype(str)
    return {family: _status_counts(group["status"]) for family, group in df.groupby(families, sort=True)}


def duplicate_pairs(df) -> int:
    """How many (problem, kernel) pairs have more than one row (a sound dataset has none)."""
    sizes = df.groupby(["problem", "kernel"], sort=False).size()
    return int((sizes > 1).sum())


def _time_range(stamps) -> dict[str, str | None]:
    """First and last timestamp (ISO text); numbers are read as seconds since the epoch."""
    import pandas as pd

    values = stamps.dropna()
    if values.empty:
        return {"first": None, "last": None}
    numeric = pd.api.types.is_numeric_dtype(values)
    times = pd.to_datetime(values, unit="s" if numeric else None, errors="coerce", utc=numeric).dropna()
    if times.empty:
        return {"first": None, "last": None}
    return {"first": times.min().isoformat(), "last": times.max().isoformat()}


# -- oracle ---------------------------------------------------------------------------------------
def oracle(df):
    """One row per problem (every problem of the data, sorted): the best kernel and how far the others are.

    Columns (ORACLE_COLUMNS): n_ok (kernels with a timing), best kernel / time / TF/s / GB/s, second-best
    kernel and time, second_ratio = second / best, median_ratio = median kernel time / best, and the vendor's
    best time with vendor_speedup = vendor / best (> 1: the oracle beats the vendor). A problem without any
    timed kernel has n_ok 0 and NaN / "" elsewhere.
    """
    import pandas as pd

    df = _checked(df)
    table = pd.DataFrame({"problem": pd.Series(sorted(df["problem"].dropna().unique()), dtype=object)})
    table = table.merge(_tags(df), on="problem", how="left")
    table = table.merge(_kernel_stats(_fastest_per_pair(_timed(df, vendor=False))), on="problem", how="left")
    table = table.merge(_vendor_stats(_timed(df, vendor=True)), on="problem", how="left")
    table["n_ok"] = table["n_ok"].fillna(0).astype(int)
    for column in ("tag", "best_kernel", "second_kernel", "vendor_kernel"):
        table[column] = table[column].fillna("").astype(str)
    for column in ("best_ms", "best_tflops", "best_gbps", "second_ms", "median_ms", "vendor_ms"):
        table[column] = table[column].astype(float)
    table["second_ratio"] = table["second_ms"] / table["best_ms"]
    table["median_ratio"] = table["median_ms"] / table["best_ms"]
    table["vendor_speedup"] = table["vendor_ms"] / table["best_ms"]
    return table[list(ORACLE_COLUMNS)].reset_index(drop=True)


def _tags(df):
    """The tag of each problem (its first non-empty one)."""
    tagged = df[df["tag"].notna() & (df["tag"].astype(str) != "")]
    return tagged.groupby("problem", sort=False)["tag"].first().reset_index()


def _kernel_stats(pairs):
    """Per problem: count, best and second (by time, then kernel name) and median of the kernel timings."""
    import pandas as pd

    columns = ["problem", "n_ok", "best_kernel", "best_ms", "best_tflops", "best_gbps", "second_kernel",
               "second_ms", "median_ms"]
    if pairs.empty:
        return pd.DataFrame(columns=columns)
    grouped = pairs.groupby("problem", sort=False)
    rank = grouped.cumcount()
    best = pairs[rank == 0].set_index("problem")
    second = pairs[rank == 1].set_index("problem")
    stats = pd.DataFrame({"n_ok": grouped.size(), "median_ms": grouped["time_ms"].median()})
    stats["best_kernel"], stats["best_ms"] = best["kernel"], best["time_ms"]
    stats["best_tflops"], stats["best_gbps"] = best["tflops"], best["gbps"]
    stats["second_kernel"], stats["second_ms"] = second["kernel"], second["time_ms"]
    return stats.rename_axis("problem").reset_index()[columns]


def _vendor_stats(vendor):
    """Per problem: the fastest vendor timing (there may be several vendor libraries)."""
    import pandas as pd

    if vendor.empty:
        return pd.DataFrame(columns=["problem", "vendor_kernel", "vendor_ms"])
    fastest = _fastest_per_pair(vendor).drop_duplicates("problem", keep="first")
    return fastest[["problem", "kernel", "time_ms"]].rename(columns={"kernel": "vendor_kernel",
                                                                     "time_ms": "vendor_ms"})


def oracle_summary(table) -> dict[str, Any]:
    """Geomeans of the oracle's ratios, how often each kernel is the best (top 10), the vendor speed-up.

    Only problems with a timed kernel count; `vendor_wins` is how many of them the vendor runs faster.
    """
    solved = table[table["n_ok"] > 0]
    wins = solved["best_kernel"].value_counts()
    ranked = sorted(wins.items(), key=lambda kv: (-int(kv[1]), str(kv[0])))
    with_vendor = solved[solved["vendor_ms"].notna()]
    speedups = with_vendor["vendor_speedup"].tolist()
    return {
        "problems": len(table), "problems_with_ok": len(solved),
        "geomean_second_ratio": geomean(solved["second_ratio"].tolist()),
        "geomean_median_ratio": geomean(solved["median_ratio"].tolist()),
        "distinct_best_kernels": len(wins),
        "best_counts": [{"kernel": str(k), "count": int(v), "share": int(v) / len(solved)}
                        for k, v in ranked[:TOP_BEST]],
        "problems_with_vendor": len(with_vendor),
        "geomean_vendor_speedup": geomean(speedups),
        "vendor_wins": sum(1 for s in speedups if s < 1),
    }


def largest_gaps(table, top: int):
    """The `top` problems with the largest second/best ratio (all with top=0); NaN ratios come last."""
    if top < 0:
        raise BadInput(f"top={top} is not valid; give 0 (all problems) or a positive count", field="top")
    ordered = table.sort_values(["second_ratio", "problem"], ascending=[False, True], na_position="last",
                                kind="stable")
    return ordered if top == 0 else ordered.head(top)


def records(table) -> list[dict[str, Any]]:
    """The oracle rows as JSON-ready dicts (plain Python values; NaN stays NaN for the JSON writer)."""
    return [{k: _plain(v) for k, v in row.items()} for row in table.to_dict("records")]


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return value
