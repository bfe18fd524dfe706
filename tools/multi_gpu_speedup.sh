#!/usr/bin/env bash
# Speedup of a sweep over two GPUs against one (issue 5): the same problems and kernels, fresh datasets,
# `--gpus 0` then `--gpus 0,1`; prints both reports and the ratio of their throughputs (pairs/s, worker
# start-up excluded). Run on a machine with 2 GPUs:  tools/multi_gpu_speedup.sh [PROBLEMS] [PRESET]
set -eu
problems=${1:-benchmarks/sweep_throughput_gemm.json}
preset=${2:-gemm_bf16_rcr_candidates}
work=${TD_WORK:-/tmp/td-speedup}
rm -rf "$work"; mkdir -p "$work"
python -m tiledispatch build --preselected "$preset" >/dev/null
for gpus in 0 0,1; do
    python -m tiledispatch sweep --problems "$problems" --preset "$preset" --gpus "$gpus" \
        --out "$work/gpus_${gpus/,/_}" --json > "$work/report_${gpus/,/_}.json"
done
python - "$work" <<'PY'
import json, sys
one, two = (json.load(open(f"{sys.argv[1]}/report_{g}.json")) for g in ("0", "0_1"))
print(json.dumps({"one_gpu": one, "two_gpus": two,
                  "speedup": two["pairs_per_second"] / one["pairs_per_second"]}, indent=1))
PY
