#!/usr/bin/env bash
# One device call: the unseen zoo timed again with every plan's time kept (issue 36), so that
# tools/zoo_offline.py can rank the same plans with any model.
#   tools/zoo_retime.sh SECONDS [KEY ...]     KEY: fwd, bwd_data, bwd_weight (conv) or gemm
#                                             (default: fwd bwd_data bwd_weight)
# With a GPU per key, one key per GPU lane (tools/gpu_lanes.sh); with fewer GPUs, the keys one after another
# on GPU 0, each with the time the ones before it left. ZOO_NDIMS (default "2 3") picks the conv spatial
# ranks. On one H200 a conv key took about 100 s per 130 3-D problems and 200 s per 270 2-D ones. Each
# command stops starting problems 60 s before SECONDS run out and keeps what it measured
# ($OUT/w.tgz: zoo_<key>.json).
set -u
secs=$1; shift
[ $# -gt 0 ] || set -- fwd bwd_data bwd_weight
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
export ZOO_END=$(($(date +%s) + secs - 60))   # no problem starts after this

command_for() {   # the rank_space.py call of one key; its deadline is computed when it starts
    local ops="--ops conv --directions $1 --ndims ${ZOO_NDIMS:-2 3}"
    [ "$1" = gemm ] && ops="--ops gemm"
    echo "python3 benchmarks/rank_space.py --zoo benchmarks/zoo/unseen_zoo.json $ops --count 400 --cold 3 \
--cache \$TILEDISPATCH_CACHE_DIR --deadline-s \$(( (d = ZOO_END - \$(date +%s)) > 1 ? d : 1 )) --keep-times --out \$W/zoo_$1.json"
}

cmds=()
for key in "$@"; do
    cmds+=("$(command_for "$key")")
done
if [ "$gpus" -ge $# ]; then
    exec "$(dirname "$0")/gpu_lanes.sh" "$secs" "${cmds[@]}"
fi
joined=$(printf '%s; ' "${cmds[@]}")
exec "$(dirname "$0")/gpu_lanes.sh" "$secs" "$joined"
