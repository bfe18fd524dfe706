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
    """(Matrix of the training problems, fold per row) as ml/train.train builds them (holdout 0.2, seed 0);
    by_model: folds grouped by model definition (ml/train.FOLD_METHOD), else by problem."""
    from tiledispatch.bench.dataset import Dataset

    frame = tr.kernel_rows(Dataset(data_dir).frame())
    problems, _ = tr.split_problems(frame["problem"].unique().tolist(), 0.2, 0)
    _, data, folds = tr.training_matrix(frame, tr.data_arch(frame), problems, by_model)
    return data, folds


def run(variant: str, data: Any, folds: Any, threads: int) -> dict[str, Any]:
    """ml/train.cross_validate of the ranker under one variant of ml/train's settings (restored after)."""
    params, objective, levels, power = VARIANTS[variant]
    saved = (dict(tr.PARAMS), dict(tr.OBJECTIVES["ranker"]), tr.RANK_LEVELS, tr.RANK_POWER)
    try:
        tr.PARAMS.update(params)
        tr.OBJECTIVES["ranker"].update(objective)
        tr.OBJECTIVES["ranker"]["label_gain"] = list(range(levels + 1))
        tr.RANK_LEVELS, tr.RANK_POWER = levels, power
        cv = tr.cross_validate("ranker", data, folds, threads)
        return {key: cv[key] for key in ("rounds", "mean", "p10", "worst")}
    finally:
        tr.PARAMS.clear()
        tr.PARAMS.update(saved[0])
        tr.OBJECTIVES["ranker"] = saved[1]
        tr.RANK_LEVELS, tr.RANK_POWER = saved[2], saved[3]


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
