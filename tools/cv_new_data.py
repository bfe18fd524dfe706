"""Do newly swept problems make the ranker pick better on the others? Same folds, with and without them (CPU).

The cross-validated numbers of a model trained on a grown dataset are not comparable with the shipped model's:
the folds hold other problems. This tool assigns the folds once, over every training problem of the grown
dataset (as `tiledispatch train` does), and fits each fold's ranker twice: on the fold's training problems,
and on the same minus the new ones (`--new`: the problems of a corpus file, by tag). Both score the same
held-out problems (ml/train.fold_tables), each at the tree count with the best mean top-1 efficiency over the
old problems of every fold pooled (ml/train.best_rounds averages per fold instead). Reported per side: mean /
P10 / worst top-1 efficiency on the old problems, on the new ones, and the geomean speed-up of the picks on
the old problems.

    python tools/cv_new_data.py data/h200/conv_fwd_bf16 --new benchmarks/zoo/train_real2d_b_fwd.json
        [--holdout 0.02] [--threads 1] [--out F.json]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def side(tables: dict[int, list[Any]], new: set[str]) -> tuple[dict[str, Any], Any]:
    """The tree count with the best mean over the old problems, its numbers and its per-problem table."""
    import numpy as np
    import pandas as pd

    joined = {rounds: pd.concat(t) for rounds, t in tables.items()}
    means = {r: float(t.loc[~t["problem"].isin(new), "eff"].mean()) for r, t in joined.items()}
    best = max(means, key=lambda r: (round(means[r], 6), -r))
    table = joined[best].set_index("problem")

    def stats(mask: Any) -> dict[str, float]:
        eff = table.loc[mask, "eff"]
        return {"problems": int(len(eff)), "mean": float(eff.mean()), "p10": float(np.quantile(eff, 0.1)),
                "worst": float(eff.min())}

    is_new = table.index.isin(list(new))
    return {"rounds": best, "old": stats(~is_new), "new": stats(is_new) if is_new.any() else None}, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--new", type=Path, required=True, help="corpus file whose problems are the new ones")
    parser.add_argument("--holdout", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import numpy as np

    from tiledispatch.bench.analysis import geomean
    from tiledispatch.bench.dataset import Dataset
    from tiledispatch.ml.train import data_arch, fold_tables, kernel_rows, split_problems, training_matrix

    frame = kernel_rows(Dataset(args.data).frame())
    arch = data_arch(frame)
    tags = {e["tag"] for e in json.loads(args.new.read_text())["problems"]}
    new = set(frame.loc[frame["tag"].isin(tags), "problem"])
    if not new:
        raise SystemExit(f"no problem of {args.data} carries a tag of {args.new}")
    problems, _ = split_problems(frame["problem"].unique().tolist(), args.holdout, args.seed)
    _, data, folds = training_matrix(frame, arch, problems)
    is_new = np.isin(data.problems, list(new))
    with_new, t_with = side(fold_tables("ranker", data, folds, args.threads), new)
    without, t_without = side(fold_tables("ranker", data, folds, args.threads, fit_mask=~is_new), new)
    old = t_with.index[~t_with.index.isin(list(new))]
    speed = t_without.loc[old, "pick_time"].to_numpy() / t_with.loc[old, "pick_time"].to_numpy()
    report = {"data": str(args.data), "new": str(args.new), "new_problems": len(new), "holdout": args.holdout,
              "with_new": with_new, "without_new": without,
              "old_pick_speedup_geomean": geomean(speed),
              "old_faster_3pct": float((speed > 1.03).mean()),
              "old_slower_3pct": float((speed < 1 / 1.03).mean())}
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
