#!/usr/bin/env bash
# Device helper: time the depthwise winners of benchmarks/results/conv_h200.json (fwd, bwd_data) with the roll
# kernels' row chunks aimed at each of the given programs-per-SM counts (tools/probe_depthwise.py
# --roll-programs-per-sm); one JSON per (count, direction) under $OUT, then a table of each layer's µs per count.
#   tools/roll_chunking.sh 4 8 16
set -u
for n in "$@"; do
    for d in fwd bwd_data; do
        python3 tools/probe_depthwise.py --direction "$d" --roll-programs-per-sm "$n" \
            --json "$OUT/roll_pps${n}_${d}.json" > "$OUT/roll_pps${n}_${d}.log" 2>&1 || echo "pps $n $d failed"
    done
done
python3 - "$@" <<'PY'
import json, os, sys
counts = sys.argv[1:]
for d in ("fwd", "bwd_data"):
    runs = {n: json.load(open(f"{os.environ['OUT']}/roll_pps{n}_{d}.json"))["rows"] for n in counts}
    print(d, "programs per SM:", " ".join(f"{n:>7}" for n in counts))
    for i, row in enumerate(runs[counts[0]]):
        name = next(iter(row["instances"]))
        times = [next(iter(runs[n][i]["instances"].values())).get("us", float("nan")) for n in counts]
        print(f"  {row['layer']:28} {'roll' if '-roll-' in name else 'tap '} "
              + " ".join(f"{t:7.1f}" for t in times))
PY
