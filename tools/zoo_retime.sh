#!/usr/bin/env bash
# One device call: the unseen zoo's conv problems timed again with every plan's time kept (issue 36), one
# direction per GPU lane (tools/gpu_lanes.sh), so that tools/zoo_offline.py can rank them with any model.
#   tools/zoo_retime.sh SECONDS [DIRECTION ...]     (default: fwd bwd_data bwd_weight on GPUs 0, 1, 2)
# ZOO_NDIMS (default "2 3") picks the spatial ranks. A whole direction took about 7 minutes on one H200;
# each lane stops starting problems 60 s before SECONDS and keeps what it measured ($OUT/w.tgz: zoo_<d>.json).
set -u
secs=$1; shift
[ $# -gt 0 ] || set -- fwd bwd_data bwd_weight
cmds=()
for d in "$@"; do
    cmds+=("python3 benchmarks/rank_space.py --zoo benchmarks/zoo/unseen_zoo.json --ops conv --directions $d \
--ndims ${ZOO_NDIMS:-2 3} --count 400 --cold 3 --cache \$TILEDISPATCH_CACHE_DIR --deadline-s $((secs - 60)) \
--keep-times --out \$W/zoo_$d.json")
done
exec "$(dirname "$0")/gpu_lanes.sh" "$secs" "${cmds[@]}"
