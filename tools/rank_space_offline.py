"""What ranking the full space buys over the essential presets, estimated on the CPU from measured datasets.

For the problems each shipped model held out of its training (data/h200/*, meta.json `holdout`), efficiency =
best measured time of the full space / measured time of the pick, for
  space        the model's top-1 over every measured kernel of the key's space (GEMM `_candidates`, conv
               `_all`): `auto` with TILEDISPATCH_RANK_SPACE on and no measuring;
  essential    the model's top-1 over the `_essential` kernels only: `auto` before (or with the setting off);
  space_top3 / essential_top3: the fastest of the model's top 3 (what unsure -> measure with
               TILEDISPATCH_MEASURE_TOP_K=3 would keep, before the vendor plan);
and how often the space pick is a kernel outside the essential set (a cold pick: compiled on first use).
Kernels of kinds a model was not trained on are never its pick (as in selection); the oracle takes every
measured kernel. The held-out problems come from the training distribution, not the unseen zoo of issue 36:
this bounds the gain, the GPU measurement (tools/rank_space_gpu.py) checks it.

    python tools/rank_space_offline.py [--out benchmarks/results/ml/rank_space_offline.json]
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATASETS = {   # dataset dir -> (model key, essential presets)
    "gemm_bf16_rcr": ("gemm_none_bf16", ["gemm_bf16_rcr_essential"]),
    "gemm_fp16_rcr": ("gemm_none_fp16", ["gemm_fp16_rcr_essential"]),
    "gemm_fp8e4m3_rcr": ("gemm_none_fp8e4m3", ["gemm_fp8e4m3_rcr_essential"]),
    "conv_fwd_bf16": ("conv_fwd_bf16", ["conv_fwd_bf16_2d_essential", "conv_fwd_bf16_3d_essential"]),
    "conv_bwd_data_bf16": ("conv_bwd_data_bf16", ["conv_bwd_data_bf16_2d_essential",
                                                  "conv_bwd_data_bf16_3d_essential"]),
    "conv_bwd_weight_bf16": ("conv_bwd_weight_bf16", ["conv_bwd_weight_bf16_2d_essential",
                                                      "conv_bwd_weight_bf16_3d_essential"]),
}
TOP = 3


def evaluate(name: str) -> dict[str, Any]:
    import numpy as np

    from tiledispatch.bench.dataset import Dataset
    from tiledispatch.configs.naming import parse_name
    from tiledispatch.ml import metrics
    from tiledispatch.ml.features import feature_frame
    from tiledispatch.ml.model import CostModel, read_meta
    from tiledispatch.ml.train import data_arch, kernel_rows
    from tiledispatch.presets import load_preset
    from tiledispatch.select.cost_model import models_root

    key, presets = DATASETS[name]
    folder = models_root() / "sm_90" / key
    meta = read_meta(folder)
    frame = Dataset(ROOT / "data" / "h200" / name).frame()
    rows = kernel_rows(frame)
    arch = data_arch(rows)
    model = CostModel.load(folder, arch)
    held_out = set(meta["holdout"]["problems"])
    rows = rows[rows["problem"].isin(held_out)].reset_index(drop=True)
    known = {k: model.knows(parse_name(k)) for k in rows["kernel"].unique()}
    scores = model.scores_of(feature_frame(rows, arch).to_numpy())
    scores = np.where(rows["kernel"].map(known).to_numpy(dtype=bool), scores, np.inf)
    essential = {cfg.name for preset in presets for cfg in load_preset(preset)}
    in_essential = rows["kernel"].isin(essential).to_numpy()
    problems, times = rows["problem"].to_numpy(), rows["time_ms"].to_numpy(dtype=float)
    best = rows.groupby("problem")["time_ms"].min()
    space = metrics.per_problem(problems, times, scores, k=TOP)
    ess = metrics.per_problem(problems[in_essential], times[in_essential], scores[in_essential], k=TOP)
    ess = ess.set_index("problem").reindex(space["problem"])   # a problem no essential kernel runs: eff 0
    ess_eff = (best.reindex(space["problem"]).to_numpy() / ess["pick_time"].to_numpy())
    ess_top = (best.reindex(space["problem"]).to_numpy() / ess["topk_time"].to_numpy())
    picks = rows["kernel"].to_numpy()[space["pick_row"].astype(int).to_numpy()]
    return {
        "dataset": f"data/h200/{name}", "model": key, "problems": int(len(space)),
        "space_kernels": int(rows["kernel"].nunique()), "essential_kernels": len(essential),
        "space": metrics.distribution(space["eff"]), "space_worst": float(space["eff"].min()),
        "essential": metrics.distribution(np.nan_to_num(ess_eff)),
        "essential_worst": float(np.nan_to_num(ess_eff).min()),
        f"space_top{TOP}": metrics.distribution(space["eff_topk"]),
        f"essential_top{TOP}": metrics.distribution(np.nan_to_num(ess_top)),
        "cold_picks": float(np.mean([p not in essential for p in picks])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    results = [evaluate(name) for name in DATASETS]
    header = (f"{'dataset':22} {'n':>4} {'space mean/med/P10/worst':>27} "
              f"{'essential mean/med/P10/worst':>31} {'top3 space/ess':>15} {'cold':>5}")
    print(header)
    for r in results:
        s, e = r["space"], r["essential"]
        print(f"{r['dataset'][10:]:22} {r['problems']:>4} "
              f"{s['mean']:.3f} {s['median']:.3f} {s['p10']:.3f} {r['space_worst']:.3f}      "
              f"{e['mean']:.3f} {e['median']:.3f} {e['p10']:.3f} {r['essential_worst']:.3f}        "
              f"{r['space_top3']['mean']:.3f}/{r['essential_top3']['mean']:.3f} {r['cold_picks']:>5.2f}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"results": results}, indent=1, default=_plain) + "\n")
        print(f"wrote {args.out}")


def _plain(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else str(value)


if __name__ == "__main__":
    main()
