#!/usr/bin/env bash
# Collect (or continue) the committed datasets on the GPU machine, within a time budget.
#   tools/gpu_sweeps.sh SECONDS NAME...     NAME: gemm_bf16_rcr gemm_fp16_rcr conv_fwd_bf16 conv_bwd_data_bf16
#                                                 conv_bwd_weight_bf16
# Each dataset starts from data/<gpu>/NAME when present (copied to $OUT/NAME) and resumes there; the
# seconds are shared by the names in order (a sweep stopped by the budget is continued by the next call).
set -u
budget=$1; shift
gpu=${TD_GPU_SLUG:-h200}
end=$(( $(date +%s) + budget ))
for name in "$@"; do
    case $name in
        gemm_bf16_rcr) args=(--problems gemm --dtype bf16 --preset gemm_bf16_rcr_candidates) ;;
        gemm_fp16_rcr) args=(--problems gemm --dtype fp16 --preset gemm_fp16_rcr_candidates) ;;
        conv_*_bf16)
            dir=${name#conv_}; dir=${dir%_bf16}
            args=(--problems "conv_$dir" --dtype bf16 --preset "conv_${dir}_bf16_2d_all" --preset "conv_${dir}_bf16_3d_all") ;;
        *) echo "unknown dataset $name" >&2; exit 2 ;;
    esac
    [ -d "data/$gpu/$name" ] && [ ! -d "$OUT/$name" ] && cp -r "data/$gpu/$name" "$OUT/$name"
    left=$(( end - $(date +%s) ))
    if [ "$left" -lt 30 ]; then echo "no time left for $name"; continue; fi
    echo "== $name (${left} s left)"
    timeout -s INT "$left" python -m tiledispatch sweep "${args[@]}" --vendor --resume --out "$OUT/$name" \
        --count "${TD_COUNT:-1100}" --json > "$OUT/$name.report.json" 2> "$OUT/$name.log"
    echo "exit $?"; tail -3 "$OUT/$name.log"; cat "$OUT/$name.report.json"; echo
    python -m tiledispatch data summary "$OUT/$name" > "$OUT/$name.summary.txt" 2>&1 || true
    head -4 "$OUT/$name.summary.txt"
done
