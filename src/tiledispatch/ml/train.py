"""`train(data_dir, out_dir)`: one sweep dataset in, one cost model out.

1. Targets: kernel rows with status ok and a finite positive time (vendor rows never count).
2. Hold-out: the problems are ordered by sha256(f"{seed}:{signature}") and the first ceil(holdout x count) are
   held out (never trained on); their signatures go into meta.json so `validate` scores exactly them.
3. Cross-validation in GROUP_FOLDS folds (see FOLD_METHOD: the problems of one model definition share a
   fold, so a fold scores layers of models the others never saw, as the unseen zoo does; split by problem,
   a layer at two batches fell in two folds and the estimate ran 1.5-2 points high) for each kind asked
   for; the number of trees is the ROUND_GRID count with the best mean top-1 efficiency over the folds (each
   fold's booster grown to MAX_ROUNDS and scored at every count; early stopping on one fold stopped the
   stop-54 bwd_weight ranker at 201 trees where the other four folds gained up to 500).
4. The kind with the best mean top-1 efficiency (best time / time of the pick, per problem) over the folds is
   refit on every training problem and saved with its metadata.
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tiledispatch.arch.spec import get_arch
from tiledispatch.bench.dataset import Dataset
from tiledispatch.bench.schema import VENDOR_FAMILY
from tiledispatch.errors import BadInput, bad_choice
from tiledispatch.ml import metrics
from tiledispatch.ml.features import feature_frame, spec_dict
from tiledispatch.ml.model import FORMAT, FORMAT_VERSION, KINDS, OFFSET_FEATURE, CostModel, data_kernel_kinds
from tiledispatch.version import __version__

# One thread unless asked: LightGBM's OpenMP threads spin-wait, and on a small machine shared with any other
# busy process two threads ran 50x slower than one (conv_bwd_data_bf16: 338 s vs 6 s on 2 cores).
DEFAULT_THREADS = 1
GROUP_FOLDS = 5
MAX_ROUNDS = 500
ROUND_GRID = tuple(range(50, MAX_ROUNDS + 1, 25))   # tree counts cross-validation chooses from
RANK_LEVELS = 30          # ranker relevance: floor(RANK_LEVELS * efficiency^RANK_POWER), linear gains
RANK_POWER = 2
PARAMS = {"learning_rate": 0.05, "num_leaves": 63, "min_data_in_leaf": 10, "feature_fraction": 0.8,
          "bagging_fraction": 0.8, "bagging_freq": 1, "max_bin": 255, "verbose": -1, "deterministic": True,
          "force_row_wise": True}
OBJECTIVES = {"regressor": {"objective": "regression", "metric": "l2"},
              "ranker": {"objective": "lambdarank", "metric": "ndcg", "eval_at": [3],
                         "lambdarank_truncation_level": 10, "label_gain": list(range(RANK_LEVELS + 1))}}
SPLIT_METHOD = "problems ordered by sha256('<seed>:<signature>'); the first ceil(holdout * problems) held out"
FOLD_METHOD = ("problems tagged '<model>/<layer>' share their model's fold (models round-robin in name "
               "order) when the tags name at least as many models as folds; the others round-robin in "
               "hash order")


# -- data ---------------------------------------------------------------------------------------------------
def data_hash(data_dir: str | Path) -> str:
    """sha256 over the dataset's parts (names and bytes, in name order)."""
    digest = hashlib.sha256()
    for part in Dataset(data_dir).parts():
        digest.update(part.name.encode() + b"\0" + part.read_bytes())
    return digest.hexdigest()


def kernel_rows(frame):
    """Rows that are targets: kernels (not vendor), status ok, finite positive time."""
    import numpy as np

    times = frame["time_ms"].astype(float)
    good = (frame["status"] == "ok") & (frame["family"] != VENDOR_FAMILY) & np.isfinite(times) & (times > 0)
    return frame[good].reset_index(drop=True)


def data_arch(frame):
    """The ArchSpec the rows were measured on (their arch, with the GPU's SM count)."""
    archs = sorted({str(a) for a in frame["arch"].dropna().unique()}) if "arch" in frame.columns else []
    if len(archs) != 1:
        raise BadInput(f"the dataset rows come from arch(s) {archs}; a model needs rows of exactly one arch",
                       field="arch")
    spec = get_arch(archs[0])
    counts = frame["sm_count"].dropna().unique() if "sm_count" in frame.columns else []
    gpus = frame["gpu"].dropna().unique() if "gpu" in frame.columns else []
    if len(counts) == 1:
        spec = spec.with_device(int(counts[0]), str(gpus[0]) if len(gpus) else spec.reference_gpu)
    return spec


def model_of(tag: object) -> str | None:
    """The model definition a problem's tag names ('resnet50/layer1.0.conv1@n32' -> 'resnet50'); None for
    fuzzed ('random...') or untagged problems."""
    text = "" if tag is None else str(tag)
    if "/" not in text or text.startswith("random"):
        return None
    return text.split("/", 1)[0]


def assign_folds(problems: Sequence[str], tags: dict[str, object], count: int) -> dict[str, int]:
    """Fold per training problem (FOLD_METHOD); `problems` in hash order, `tags` by problem."""
    owner = {p: model_of(tags.get(p)) for p in problems}
    models = sorted({m for m in owner.values() if m is not None})
    of_model = {m: i % count for i, m in enumerate(models)} if len(models) >= count else {}
    return {p: of_model.get(owner[p], i % count) for i, p in enumerate(problems)}


def _order_key(seed: int, signature: str) -> str:
    return hashlib.sha256(f"{seed}:{signature}".encode()).hexdigest()


def split_problems(problems: Sequence[str], holdout: float, seed: int) -> tuple[list[str], list[str]]:
    """(training, held-out) problem signatures, each in hash order (see SPLIT_METHOD)."""
    if not 0 < holdout < 1:
        raise BadInput(f"holdout={holdout} must be a fraction strictly between 0 and 1", field="holdout")
    ordered = sorted(set(problems), key=lambda p: _order_key(seed, p))
    count = math.ceil(holdout * len(ordered))
    if len(ordered) - count < 2:
        raise BadInput(f"{len(ordered)} problems leave fewer than 2 to train on with holdout={holdout}",
                       field="holdout")
    return ordered[count:], ordered[:count]


# -- fitting ------------------------------------------------------------------------------------------------
def relevance(problems, times):
    """Ranker labels: floor(RANK_LEVELS * (best / time)^RANK_POWER) per problem."""
    import numpy as np
    import pandas as pd

    best = pd.Series(times).groupby(np.asarray(problems)).transform("min").to_numpy()
    eff = best / np.asarray(times, dtype=np.float64)
    return np.clip(np.floor(RANK_LEVELS * eff ** RANK_POWER), 0, RANK_LEVELS).astype(int)


@dataclasses.dataclass(frozen=True)
class Matrix:
    """Training rows sorted by problem: features (spec order), problem signatures, times (ms)."""

    x: Any
    problems: Any
    times: Any
    offset: int          # column of OFFSET_FEATURE (the regressor's target is relative to it)

    def subset(self, mask) -> Matrix:
        return Matrix(self.x[mask], self.problems[mask], self.times[mask], self.offset)


def _dataset(kind: str, data: Matrix):
    """A LightGBM Dataset (ranker groups are contiguous: rows are sorted by problem)."""
    import lightgbm as lgb
    import numpy as np

    if kind == "regressor":
        target = np.log2(data.times * 1e3) - data.x[:, data.offset]
        return lgb.Dataset(data.x, target, free_raw_data=False)
    _, counts = np.unique(data.problems, return_counts=True)
    return lgb.Dataset(data.x, relevance(data.problems, data.times), group=counts, free_raw_data=False)


def fit(kind: str, data: Matrix, rounds: int, threads: int):
    """A booster of `kind` with `rounds` trees."""
    import lightgbm as lgb

    params = {**PARAMS, **OBJECTIVES[kind], "num_threads": threads, "seed": 0}
    return lgb.train(params, _dataset(kind, data), num_boost_round=rounds)


def predict(kind: str, booster, data: Matrix, rounds: int | None = None):
    """Lower-is-better scores (as CostModel.scores_of computes them), from the first `rounds` trees (None:
    all)."""
    raw = booster.predict(data.x, num_iteration=rounds, num_threads=1)
    return raw + data.x[:, data.offset] if kind == "regressor" else -raw


def fold_tables(kind: str, data: Matrix, folds, threads: int, fit_mask=None) -> dict[int, list[Any]]:
    """Grouped k-fold: per ROUND_GRID count, each fold's metrics.per_problem table of its held-out problems,
    scored by the first `count` trees of one MAX_ROUNDS booster per fold. `fit_mask` (rows): fit each fold's
    booster on these of its training rows only (tools/cv_new_data.py); None: all of them."""
    tables: dict[int, list[Any]] = {rounds: [] for rounds in ROUND_GRID}
    for i in range(int(folds.max()) + 1):
        train_rows = folds != i if fit_mask is None else (folds != i) & fit_mask
        booster = fit(kind, data.subset(train_rows), MAX_ROUNDS, threads)
        valid = data.subset(folds == i)
        for rounds in ROUND_GRID:
            tables[rounds].append(metrics.per_problem(valid.problems, valid.times,
                                                      predict(kind, booster, valid, rounds)))
    return tables


def best_rounds(tables: dict[int, list[Any]]) -> tuple[int, dict[int, float]]:
    """The count with the best mean top-1 efficiency over the folds (ties: fewer trees), and every count's."""
    import numpy as np

    means = {rounds: float(np.mean([t["eff"].mean() for t in folds])) for rounds, folds in tables.items()}
    return max(means, key=lambda rounds: (round(means[rounds], 6), -rounds)), means


def cross_validate(kind: str, data: Matrix, folds, threads: int) -> dict[str, Any]:
    """fold_tables at the best_rounds count: its mean / P10 / worst top-1 efficiency per fold and over the
    folds, and every count's mean."""
    import numpy as np

    tables = fold_tables(kind, data, folds, threads)
    best, means = best_rounds(tables)
    results = [{"problems": len(t), "mean": float(t["eff"].mean()), "p10": float(np.quantile(t["eff"], 0.1)),
                "worst": float(t["eff"].min())} for t in tables[best]]
    return {"rounds": best, "folds": results,
            **{key: float(np.mean([r[key] for r in results])) for key in ("mean", "p10", "worst")},
            "mean_by_rounds": {str(rounds): means[rounds] for rounds in ROUND_GRID}}


def training_matrix(frame, arch, problems: Sequence[str], by_model: bool = True):
    """(rows, Matrix, fold per row) of `problems` (the training ones, in hash order) from a frame of kernel
    rows, as `train` fits and cross-validates them; by_model=False: problem folds only (FOLD_METHOD)."""
    import numpy as np

    rows = frame[frame["problem"].isin(set(problems))].sort_values("problem", kind="stable")
    rows = rows.reset_index(drop=True)
    features = feature_frame(rows, arch)
    data = Matrix(features.to_numpy(), rows["problem"].to_numpy(), rows["time_ms"].to_numpy(dtype=float),
                  features.columns.get_loc(OFFSET_FEATURE))
    tags = rows.groupby("problem")["tag"].first().to_dict() if by_model and "tag" in rows.columns else {}
    fold = assign_folds(problems, tags, min(GROUP_FOLDS, len(problems)))
    return rows, data, np.array([fold[p] for p in data.problems])


# -- the command --------------------------------------------------------------------------------------------
def train(data_dir: str | Path, out_dir: str | Path, *, holdout: float = 0.2, seed: int = 0,
          kinds: Sequence[str] = KINDS, num_threads: int | None = None) -> dict[str, Any]:
    """Train a cost model on the dataset in `data_dir` and save it into `out_dir`; returns the report."""
    start = time.perf_counter()
    kinds = tuple(kinds)
    for kind in kinds:
        if kind not in KINDS:
            raise bad_choice(BadInput, "kind", kind, KINDS)
    if not kinds:
        raise BadInput("kinds is empty; give at least one of " + ", ".join(KINDS), field="kind")
    threads = num_threads or DEFAULT_THREADS
    dataset = Dataset(data_dir)
    manifest = dataset.manifest()
    frame = kernel_rows(dataset.frame())
    if frame.empty:
        raise BadInput(f"{data_dir} holds no kernel row with status ok and a time", field="data")
    arch = data_arch(frame)
    train_problems, held_out = split_problems(frame["problem"].unique().tolist(), holdout, seed)
    rows, data, folds = training_matrix(frame, arch, train_problems)
    cv = {kind: cross_validate(kind, data, folds, threads) for kind in kinds}
    kind = max(kinds, key=lambda k: (cv[k]["mean"], cv[k]["p10"]))
    booster = fit(kind, data, cv[kind]["rounds"], threads)
    meta = _meta(manifest, rows, frame, arch, kind, cv, holdout, seed, held_out, data_dir)
    seconds = time.perf_counter() - start
    meta["training"]["seconds"] = round(seconds, 2)
    CostModel(booster, meta).save(out_dir)
    return {"out": str(out_dir), "kind": kind, "cv": cv, "rows": len(rows), "problems": len(train_problems),
            "holdout_problems": len(held_out), "features": data.x.shape[1], "seconds": seconds,
            "data_hash": meta["data"]["hash"], "arch": meta["arch"], "op": meta["op"],
            "direction": meta["direction"], "dtype": meta["dtype"]}


def _versions() -> dict[str, str | None]:
    from importlib import metadata

    import lightgbm

    try:
        triton = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton = None
    return {"tiledispatch": __version__, "lightgbm": lightgbm.__version__, "triton": triton}


def _meta(manifest: dict[str, Any], rows, frame, arch, kind: str, cv: dict[str, Any], holdout: float,
          seed: int, held_out: list[str], data_dir: str | Path) -> dict[str, Any]:
    op = str(manifest.get("op") or rows["op"].iloc[0])
    gpus = sorted({str(g) for g in frame["gpu"].dropna().unique()}) if "gpu" in frame.columns else []
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "arch": arch.name, "sm_count": arch.sm_count,
        "op": op, "direction": str(manifest.get("direction")), "dtype": str(manifest.get("dtype")),
        "kind": kind,
        "feature_spec": spec_dict(op), "kernel_kinds": data_kernel_kinds(rows),
        "data": {"path": str(data_dir), "hash": data_hash(data_dir), "rows": len(frame),
                 "problems": int(frame["problem"].nunique())},
        "trained_on": {"rows": len(rows), "problems": int(rows["problem"].nunique())},
        "holdout": {"fraction": holdout, "seed": seed, "method": SPLIT_METHOD, "count": len(held_out),
                    "problems": sorted(held_out)},
        "gpu": gpus[0] if len(gpus) == 1 else gpus, "versions": _versions(),
        "created": datetime.datetime.now().isoformat(timespec="seconds"),
        "training": {"params": {**PARAMS, **OBJECTIVES[kind]}, "rounds": cv[kind]["rounds"],
                     "folds": GROUP_FOLDS, "fold_method": FOLD_METHOD,
                     "cv": {k: {"mean": v["mean"], "p10": v["p10"], "rounds": v["rounds"]}
                            for k, v in cv.items()},
                     "rounds_by": f"the best mean top-1 efficiency over the folds of {list(ROUND_GRID)}",
                     "selected_by": "mean top-1 efficiency over the folds"},
    }
