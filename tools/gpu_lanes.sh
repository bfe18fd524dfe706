#!/usr/bin/env bash
# One device call on a multi-GPU machine: one command per GPU, run in parallel, each with its own
# tiledispatch, Triton and Inductor caches (a copy of ./.tdcache when present) and CUDA_VISIBLE_DEVICES.
#   tools/gpu_lanes.sh SECONDS "command for GPU 0" "command for GPU 1" ...
# Each command runs under `timeout -s INT SECONDS`, sees $W (write results there) and $LANE; its log is
# $OUT/laneI.log, and everything under $W comes back as $OUT/w.tgz (the device returns at most 8 files).
# Independent lanes share the host's cores: time stock and converted in the same lane, never across lanes.
set -u
secs=$1; shift
export W=$OUT/w
mkdir -p "$W"
i=0
for cmd in "$@"; do
    d=/tmp/lanes/$i
    if [ ! -d "$d" ]; then
        mkdir -p "$d/td"
        if [ -d .tdcache ]; then cp -r .tdcache/. "$d/td"; fi
    fi
    ( export CUDA_VISIBLE_DEVICES=$i TILEDISPATCH_CACHE_DIR=$d/td TRITON_CACHE_DIR=$d/td/triton \
             TORCHINDUCTOR_CACHE_DIR=$d/inductor TILEDISPATCH_MAX_WORKERS=${TD_WORKERS:-16} LANE=$i
      echo "== lane $i: $cmd  $(date +%T)"
      timeout -s INT "$secs" bash -c "$cmd"
      echo "== lane $i exit $? $(date +%T)" ) > "$OUT/lane$i.log" 2>&1 &
    i=$((i + 1))
done
wait
tar -C "$OUT" -czf "$OUT/w.tgz" w && rm -rf "$W"
for f in "$OUT"/lane*.log; do tail -n 4 "$f"; done
