#!/usr/bin/env bash
# Collect (or continue) the committed datasets on the GPU machine, within a time budget.
#   tools/gpu_sweeps.sh SECONDS NAME...     NAME: gemm_bf16_rcr gemm_fp16_rcr gemm_fp8e4m3_rcr conv_fwd_bf16 conv_bwd_data_bf16
#                                                 conv_bwd_weight_bf16
# Each dataset starts from data/<gpu>/NAME when present and resumes in a work directory ($TD_WORK, default
# /tmp/td-datasets); the seconds are shared by the names in order (a sweep stopped by the budget is continued
# by the next call). What comes back: $OUT/NAME.tar (the dataset, compacted to one part) and $OUT/sweeps.log.
# TD_DROP_FAMILIES="direct ..." first drops the committed rows of kernel families whose code changed (once per
# work directory), so the resumed sweep measures them again. TD_PROBLEMS=PREFIX adds the problems of the files
# PREFIX_<direction>.json to a conv dataset instead of random ones (e.g. benchmarks/zoo/train_real2d: real
# layers of timm models, tools/train_corpus.py). TD_NDIMS="3" sweeps the conv presets of those ranks only
# (default "2 3"; the 3-D corpus benchmarks/zoo/train_real3d needs no 2-D kernel built). Each sweep stops
# TD_COMPACT_S seconds (default 90) before the budget runs out: compacting and packing a 57k-row sweep took
# about 80 s on the H200 machine.
set -u
budget=$1; shift
gpu=${TD_GPU_SLUG:-h200}
work=${TD_WORK:-/tmp/td-datasets}
end=$(( $(date +%s) + budget ))
mkdir -p "$work"
log="$OUT/sweeps.log"
for name in "$@"; do
    random_problems=(--count "${TD_COUNT:-1100}")
    case $name in
        gemm_bf16_rcr) args=(--problems gemm --dtype bf16 --preset gemm_bf16_rcr_candidates) ;;
        gemm_fp16_rcr) args=(--problems gemm --dtype fp16 --preset gemm_fp16_rcr_candidates) ;;
        gemm_fp8e4m3_rcr) args=(--problems gemm --dtype fp8e4m3 --preset gemm_fp8e4m3_rcr_candidates) ;;
        conv_*_bf16)
            dir=${name#conv_}; dir=${dir%_bf16}
            args=(--problems "conv_$dir" --dtype bf16)
            if [ -n "${TD_PROBLEMS:-}" ]; then   # a file: the sweep takes no --dtype or --count with it
                args=(--problems "${TD_PROBLEMS}_${dir}.json"); random_problems=()
            fi
            for nd in ${TD_NDIMS:-2 3}; do args+=(--preset "conv_${dir}_bf16_${nd}d_all"); done ;;
        *) echo "unknown dataset $name" >&2; exit 2 ;;
    esac
    if [ -d "data/$gpu/$name" ] && [ ! -d "$work/$name" ]; then
        cp -r "data/$gpu/$name" "$work/$name"
        for family in ${TD_DROP_FAMILIES:-}; do
            python -m tiledispatch data drop "$work/$name" --family "$family" 2>&1 | tee -a "$log"
        done
    fi
    left=$(( end - $(date +%s) - ${TD_COMPACT_S:-90} ))
    if [ "$left" -lt 30 ]; then echo "no time left for $name" | tee -a "$log"; continue; fi
    echo "== $name (${left} s left)" | tee -a "$log"
    timeout -s INT "$left" python -m tiledispatch sweep "${args[@]}" "${random_problems[@]}" --vendor --resume \
        --out "$work/$name" --json 2>> "$log" | tee -a "$log"
    echo "exit ${PIPESTATUS[0]}" | tee -a "$log"
    python -m tiledispatch data compact "$work/$name" 2>&1 | tee -a "$log"
    python -m tiledispatch data summary "$work/$name" 2>&1 | head -5 | tee -a "$log"
    rm -f "$work/$name/.lock"
    tar -cf "$OUT/$name.tar" -C "$work" "$name"
done
