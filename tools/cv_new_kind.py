"""Does a new kernel kind make `auto`'s picks faster? Out-of-fold picks with and without it (CPU).

Adding a kind to a dataset lowers the cross-validated efficiency whenever the new kind raises the oracle
faster than the model learns it, yet the picks can still be faster than before. This tool cross-validates
the ranker as `tiledispatch train` does (same training problems, folds and choice of the tree count) on the
dataset with every row and on the dataset without the rows of `--kloop`. Per training problem it compares
the measured times of the two out-of-fold picks: geomean speed-up (old pick time / new pick time), the
shares of problems where the new pick is faster or slower by more than 3%, and both efficiencies against
the oracle with the kind; overall, on the problems with rows of the kind, and on the others.

    python tools/cv_new_kind.py data/h200/conv_bwd_weight_bf16 --kloop halofh [--holdout 0.02] [--out F.json]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def out_of_fold_picks(frame: Any, arch: str, problems: list[str], threads: int) -> Any:
    """Per problem, the measured time of the ranker's out-of-fold top-1 pick, at the tree count `train`
    would choose (ml/train.best_rounds)."""
    import numpy as np
    import pandas as pd

    from tiledispatch.ml.train import best_rounds, fold_tables, training_matrix

    _, data, folds = training_matrix(frame, arch, problems)
    tables = fold_tables("ranker", data, folds, threads)
    best, _ = best_rounds(tables)
    return pd.concat([t.set_index("problem")["pick_time"] for t in tables[best]]).astype(np.float64)


def summary(old: Any, new: Any, best: Any) -> dict[str, Any]:
    import numpy as np

    from tiledispatch.bench.analysis import geomean

    speed = old / new
    return {"problems": int(len(speed)), "pick_speedup_geomean": geomean(speed),
            "new_faster_3pct": float((speed > 1.03).mean()),
            "new_slower_3pct": float((speed < 1 / 1.03).mean()),
            "eff_old": float((best / old).mean()), "eff_new": float((best / new).mean()),
            "p10_old": float(np.quantile(best / old, 0.1)), "p10_new": float(np.quantile(best / new, 0.1))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--kloop", required=True)
    parser.add_argument("--holdout", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from tiledispatch.bench.dataset import Dataset
    from tiledispatch.ml.train import data_arch, kernel_rows, split_problems

    frame = kernel_rows(Dataset(args.data).frame())
    arch = data_arch(frame)
    problems, _ = split_problems(frame["problem"].unique().tolist(), args.holdout, args.seed)
    without = frame[frame["c_kloop"] != args.kloop]
    new = out_of_fold_picks(frame, arch, problems, args.threads)
    old = out_of_fold_picks(without, arch, problems, args.threads)
    common = new.index.intersection(old.index)
    new, old = new[common], old[common]
    best = frame[frame["problem"].isin(set(common))].groupby("problem")["time_ms"].min()[common]
    has = set(frame.loc[frame["c_kloop"] == args.kloop, "problem"])
    mask = common.isin(list(has))
    report = {"data": str(args.data), "kloop": args.kloop, "holdout": args.holdout,
              "all": summary(old, new, best),
              f"with_{args.kloop}": summary(old[mask], new[mask], best[mask]),
              f"without_{args.kloop}": summary(old[~mask], new[~mask], best[~mask])}
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
