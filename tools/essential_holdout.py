"""How well `auto` does over the essential conv presets, on the problems each shipped conv model held out.

By default `auto` ranks the essential preset only (TILEDISPATCH_RANK_SPACE unset) and, when unsure, times its
top 5. Per direction, over the held-out problems of the shipped bf16 model (data/h200), this reports the
efficiency (fastest ok kernel of the whole dataset / time of the pick) of the model's top-1 and of the fastest
of its top 5, among: the kernels of the current bf16 essential presets (2-D and 3-D), and every kernel.
Instances are compared as tools/derive_conv_essential.instance_key names them.

    python tools/essential_holdout.py [--data data/h200] [--out PATH]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from derive_conv_essential import DIRECTIONS, KEY_FIELDS, instance_key, preset_keys  # noqa: E402

TOP_K = 5


def efficiencies(direction: str, data: Path) -> dict[str, dict[str, Any]]:
    """{'essential' | 'all': {'top1': [...], 'top5': [...]}} over the held-out problems of `direction`."""
    from tiledispatch.bench.dataset import Dataset
    from tiledispatch.ml.features import feature_frame
    from tiledispatch.ml.model import CostModel, read_meta
    from tiledispatch.ml.train import data_arch, kernel_rows

    folder = ROOT / "src" / "tiledispatch" / "models" / "sm_90" / f"conv_{direction}_bf16"
    held = set(read_meta(folder)["holdout"]["problems"])
    rows = kernel_rows(Dataset(data / f"conv_{direction}_bf16").frame())
    rows = rows[(rows["status"] == "ok") & rows["problem"].isin(held)].reset_index(drop=True)
    arch = data_arch(rows)
    rows["score"] = CostModel.load(folder, arch).scores_of(feature_frame(rows, arch).to_numpy())
    rows["instance"] = [instance_key(v) for v in zip(*(rows[c] for c in KEY_FIELDS))]
    best = rows.groupby("problem")["time_ms"].min()
    essential = set(preset_keys(direction))
    out: dict[str, dict[str, Any]] = {}
    for name, sub in (("essential", rows[rows["instance"].isin(essential)]), ("all", rows)):
        top1, top5 = [], []
        for problem, group in sub.sort_values("score", kind="stable").groupby("problem", sort=True):
            top1.append(float(best[problem] / group["time_ms"].iloc[0]))
            top5.append(float(best[problem] / group["time_ms"].iloc[:TOP_K].min()))
        out[name] = {"top1": top1, "top5": top5}
    out["essential"]["instances"] = len(essential)
    return out


def main(argv: list[str] | None = None) -> int:
    from rank_space import distribution  # benchmarks/rank_space.py

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "h200")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"data": str(args.data), "top_k": TOP_K}
    for direction in DIRECTIONS:
        result = efficiencies(direction, args.data)
        report[direction] = {name: {k: (distribution(v) if isinstance(v, list) else v) for k, v in r.items()}
                             for name, r in result.items()}
        for name, r in report[direction].items():
            cells = "  ".join(f"{k} " + " / ".join(f"{100 * v[m]:.1f}" for m in ("mean", "p10", "worst"))
                              for k, v in r.items() if isinstance(v, dict))
            print(f"{direction:10s} {name:9s} {cells}", flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "benchmarks"))
    sys.exit(main())
