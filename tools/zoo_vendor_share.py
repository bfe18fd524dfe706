"""How often the vendor plan beats our best plan on the unseen zoo, from committed GPU timings
(benchmarks/results/zoo/*_times.json.gz, whose rows carry `eff_vendor`: our best plan's time over the
vendor's, so above 1 where the vendor is faster): per key, the problems where cuDNN / cuBLAS is faster than
every plan of ours, by 1.25x and by 1.5x, those where ours is faster by 1.25x, and the geomean of the
vendor's speed over our best. The first share is of layer problems whose first call compiles and times our
plans only to pick the vendor's.

    python tools/zoo_vendor_share.py TIMES.json.gz [...] [--json PATH]
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
from pathlib import Path


def vendor_ratios(result: dict) -> list[tuple[str, float]]:
    """(problem signature, eff_vendor) of each row of one zoo key's result that timed the vendor's plan."""
    return [(row.get("problem", ""), float(row["eff_vendor"])) for row in result["rows"]
            if row.get("eff_vendor") not in (None, "None", "") and float(row["eff_vendor"]) > 0]


def shares(path: Path) -> dict[str, dict]:
    data = json.loads(gzip.open(path).read())
    out = {}
    for key, result in data["results"].items():
        ratios = [ratio for _, ratio in vendor_ratios(result)]
        if not ratios:
            continue
        out[key] = {"problems": len(ratios), "vendor_faster": sum(r > 1 for r in ratios),
                    "vendor_1.25x": sum(r > 1.25 for r in ratios),
                    "vendor_1.5x": sum(r > 1.5 for r in ratios),
                    "ours_1.25x": sum(r < 1 / 1.25 for r in ratios),
                    "geomean_vendor_over_ours": math.exp(sum(map(math.log, ratios)) / len(ratios)),
                    "source": path.name}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("times", nargs="+", type=Path)
    ap.add_argument("--json")
    opts = ap.parse_args()
    rows: dict[str, dict] = {}
    for path in opts.times:   # later files re-time keys of earlier ones: the last one wins
        rows.update(shares(path))
    for key, row in sorted(rows.items()):
        n = row["problems"]
        print(f"{key:40s} {n:4d}  vendor faster {row['vendor_faster'] / n:5.1%}"
              f"  by 1.25x {row['vendor_1.25x'] / n:5.1%}  by 1.5x {row['vendor_1.5x'] / n:5.1%}"
              f"  ours by 1.25x {row['ours_1.25x'] / n:5.1%}"
              f"  geomean vendor/ours {row['geomean_vendor_over_ours']:.3f}")
    if opts.json:
        Path(opts.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
