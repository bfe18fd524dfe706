"""Cross-validated variants of the cost-model training on a sweep dataset (CPU; issue 36).

For each variant (LightGBM parameters, ranker objective and labels) the same grouped 5-fold split as
`tiledispatch train` (ml/train.py, the held-out problems excluded) scores mean / P10 / worst top-1 efficiency
per fold, and their means. Variants are chosen on these numbers alone, never on the unseen zoo.

Usage:  python tools/cv_grid.py data/h200/conv_fwd_bf16 [...] [--variants base,leaves31,...] [--by-model]
        [--out F.json]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tiledispatch.ml import metrics
from tiledispatch.ml import train as tr

# name -> (PARAMS changes, ranker OBJECTIVES changes, RANK_LEVELS, efficiency exponent of the labels)
VARIANTS: dict[str, tuple[dict, dict, int, float]] = {
    "base": ({}, {}, 30, 2.0),
    "leaves31": ({"num_leaves": 31}, {}, 30, 2.0),
    "leaves127": ({"num_leaves": 127}, {}, 30, 2.0),
    "minleaf40": ({"min_data_in_leaf": 40}, {}, 30, 2.0),
    "trunc30": ({}, {"lambdarank_truncation_level": 30}, 30, 2.0),
    "eff4": ({}, {}, 30, 4.0),
    "eff1": ({}, {}, 30, 1.0),
    "xendcg": ({}, {"objective": "rank_xendcg"}, 30, 2.0),
    "lr03": ({"learning_rate": 0.03}, {}, 30, 2.0),
}


def matrix(data_dir: str, by_model: bool = False) -> tuple[Any, Any]:
    """(Matrix of the training problems, fold per row) exactly as ml/train.train builds them; by_model: the
    problems of one model definition (the tag's part before '/') share a fold (random problems as before),
    so a fold's real layers come from models the other folds never saw, as the unseen zoo's do."""
    import numpy as np

    from tiledispatch.bench.dataset import Dataset
    from tiledispatch.ml.features import feature_frame
    from tiledispatch.ml.model import OFFSET_FEATURE

    frame = tr.kernel_rows(Dataset(data_dir).frame())
    arch = tr.data_arch(frame)
    problems, _ = tr.split_problems(frame["problem"].unique().tolist(), 0.2, 0)
    rows = frame[frame["problem"].isin(set(problems))].sort_values("problem", kind="stable")
    rows = rows.reset_index(drop=True)
    features = feature_frame(rows, arch)
    data = tr.Matrix(features.to_numpy(), rows["problem"].to_numpy(), rows["time_ms"].to_numpy(dtype=float),
                     features.columns.get_loc(OFFSET_FEATURE))
    position = {p: i for i, p in enumerate(problems)}
    fold = {p: i % tr.GROUP_FOLDS for p, i in position.items()}
    if by_model:
        tags = rows.groupby("problem")["tag"].first()
        models = sorted({str(t).split("/")[0] for t in tags if not str(t).startswith("random")})
        model_fold = {m: i % tr.GROUP_FOLDS for i, m in enumerate(models)}
        fold.update({p: model_fold[str(t).split("/")[0]] for p, t in tags.items()
                     if not str(t).startswith("random")})
    return data, np.array([fold[p] for p in data.problems])


def cross_validate(data: Any, folds: Any, threads: int) -> dict[str, Any]:
    """ml/train.cross_validate for the ranker, with each fold's worst efficiency too."""
    import numpy as np

    out, rounds = [], tr.MAX_ROUNDS
    for i in range(int(folds.max()) + 1):
        part, valid = data.subset(folds != i), data.subset(folds == i)
        booster, found = tr.fit("ranker", part, rounds, threads, valid=valid if i == 0 else None)
        rounds = found if i == 0 else rounds
        eff = metrics.per_problem(valid.problems, valid.times, tr.predict("ranker", booster, valid))["eff"]
        out.append((float(eff.mean()), float(np.quantile(eff, 0.1)), float(eff.min())))
    return {"rounds": rounds, "mean": float(np.mean([o[0] for o in out])),
            "p10": float(np.mean([o[1] for o in out])), "worst": float(np.mean([o[2] for o in out]))}


def run(variant: str, data: Any, folds: Any, threads: int) -> dict[str, Any]:
    params, objective, levels, power = VARIANTS[variant]
    saved = (dict(tr.PARAMS), dict(tr.OBJECTIVES["ranker"]), tr.RANK_LEVELS, tr.relevance)
    base_relevance = tr.relevance

    def relevance(problems: Any, times: Any) -> Any:
        import numpy as np
        import pandas as pd

        best = pd.Series(times).groupby(np.asarray(problems)).transform("min").to_numpy()
        eff = best / np.asarray(times, dtype=np.float64)
        return np.clip(np.floor(levels * eff ** power), 0, levels).astype(int)

    try:
        tr.PARAMS.update(params)
        tr.OBJECTIVES["ranker"].update(objective)
        tr.OBJECTIVES["ranker"]["label_gain"] = list(range(levels + 1))
        tr.RANK_LEVELS, tr.relevance = levels, (relevance if power != 2.0 else base_relevance)
        return cross_validate(data, folds, threads)
    finally:
        tr.PARAMS.clear()
        tr.PARAMS.update(saved[0])
        tr.OBJECTIVES["ranker"] = saved[1]
        tr.RANK_LEVELS, tr.relevance = saved[2], saved[3]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="+")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--by-model", action="store_true", help="folds grouped by model definition")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results: dict[str, dict[str, Any]] = {}
    for data_dir in args.data:
        data, folds = matrix(data_dir, args.by_model)
        for variant in args.variants.split(","):
            name = Path(data_dir).name
            row = results.setdefault(name, {})[variant] = run(variant, data, folds, args.threads)
            print(f"{name:22s} {variant:10s} mean {100 * row['mean']:.2f} p10 {100 * row['p10']:.2f}"
                  f" worst {100 * row['worst']:.2f} rounds {row['rounds']}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
