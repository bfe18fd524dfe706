#!/usr/bin/env bash
# One device call: install the carried wheels (.whl), then run the named steps in order, each within its own
# seconds; logs and result JSON go under $OUT.
#   tools/gpu_session.sh STEP:SECONDS ...
# STEP: lane-new (GPU lane of the kernels changed last: roll, padded plans, TMA incl. split), lane-gemm (GEMM and
#       TMA GPU tests), lane-conv (conv GPU tests: $TD_PYTEST_FILES or test_conv_gpu.py, -k $TD_PYTEST_K when set), lane (whole GPU lane),
#       conv (benchmarks/conv.py), conv-part (benchmarks/conv.py $TD_CONV_ARGS), gemm (benchmarks/gemm.py),
#       sweep-candidates (full matrix of the candidate presets per combo of $TD_COMBOS, for tools/derive_presets.py),
#       gemm-part (benchmarks/gemm.py $TD_GEMM_ARGS), profile (tools/profile_padding.py $TD_PROFILE_ARGS),
#       profile-wgrad (tools/profile_wgrad.py $TD_PROFILE_ARGS), profile-conv (tools/profile_conv.py $TD_PROFILE_ARGS),
#       profile-gemm (tools/profile_gemm.py $TD_PROFILE_ARGS), l2 (tools/probe_l2_bandwidth.py $TD_L2_ARGS),
#       host (tools/profile_host.py $TD_HOST_ARGS), tool (python3 $TD_TOOL: a probe script and its arguments,
#       given --json $OUT/tool_<gpu>.json)
set -u
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site:$PWD/src
else
    export PYTHONPATH=$PWD/src
fi
export PYTHONUNBUFFERED=1
gpu=${TD_GPU_SLUG:-h200}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/session.log"
for step in "$@"; do
    name=${step%%:*}; secs=${step#*:}
    echo "== $name ($secs s) $(date +%T)" | tee -a "$OUT/session.log"
    if [ "$name" = sweep-candidates ]; then   # full matrix of the candidate presets, one JSON per combo
        end=$(( $(date +%s) + secs ))
        for combo in ${TD_COMBOS:-bf16_rcr fp16_rcr bf16_rrr fp16_rrr fp8e4m3_rcr}; do
            left=$(( end - $(date +%s) )); [ "$left" -lt 20 ] && { echo "no time left for $combo"; break; }
            timeout -s INT "$left" python3 benchmarks/gemm.py --preset-kind candidates --full-matrix \
                --dtypes "${combo%_*}" --layouts "${combo#*_}" --out "$OUT/sweep_${combo}_$gpu.json" \
                >> "$OUT/sweeps.log" 2>&1
            echo "$combo exit $? $(date +%T)" | tee -a "$OUT/session.log"
        done
        continue
    fi
    case $name in
        lane-new) cmd=(python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_conv_roll_gpu.py
                       tests/gpu/test_gemm_gpu.py tests/gpu/test_tma_gpu.py) ;;
        lane-gemm) cmd=(python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_gemm_gpu.py
                        tests/gpu/test_tma_gpu.py) ;;
        lane-conv) read -ra files <<< "${TD_PYTEST_FILES:-tests/gpu/test_conv_gpu.py}"
                   cmd=(python3 -m pytest -m gpu -q -p no:cacheprovider "${files[@]}"
                        ${TD_PYTEST_K:+-k "$TD_PYTEST_K"}) ;;
        lane) cmd=(python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu) ;;
        conv) cmd=(python3 benchmarks/conv.py --no-markdown --out "$OUT/conv_$gpu.json") ;;
        conv-part) read -ra extra <<< "${TD_CONV_ARGS:-}"
                   cmd=(python3 benchmarks/conv.py --no-markdown "${extra[@]}" --out "$OUT/conv_part_$gpu.json") ;;
        profile-wgrad) read -ra extra <<< "${TD_PROFILE_ARGS:-}"
                       cmd=(python3 tools/profile_wgrad.py "${extra[@]}" --json "$OUT/profile_wgrad_$gpu.json") ;;
        profile-conv) read -ra extra <<< "${TD_PROFILE_ARGS:-}"
                      cmd=(python3 tools/profile_conv.py "${extra[@]}" --json "$OUT/profile_conv_$gpu.json") ;;
        profile-gemm) read -ra extra <<< "${TD_PROFILE_ARGS:-}"
                      cmd=(python3 tools/profile_gemm.py "${extra[@]}" --json "$OUT/profile_gemm_$gpu.json") ;;
        profile) read -ra extra <<< "${TD_PROFILE_ARGS:-}"
                 cmd=(python3 tools/profile_padding.py "${extra[@]}" --json "$OUT/profile_$gpu.json") ;;
        l2) read -ra extra <<< "${TD_L2_ARGS:-}"
            cmd=(python3 tools/probe_l2_bandwidth.py "${extra[@]}" --json "$OUT/probe_l2_$gpu.json") ;;
        host) read -ra extra <<< "${TD_HOST_ARGS:-}"
              cmd=(python3 tools/profile_host.py "${extra[@]}" --json "$OUT/profile_host_$gpu.json") ;;
        tool) read -ra extra <<< "${TD_TOOL:-}"
              cmd=(python3 "${extra[@]}" --json "$OUT/tool_$gpu.json") ;;
        gemm) cmd=(python3 benchmarks/gemm.py --out "$OUT/gemm_$gpu.json") ;;
        gemm-part) read -ra extra <<< "${TD_GEMM_ARGS:-}"
                   cmd=(python3 benchmarks/gemm.py "${extra[@]}" --out "$OUT/gemm_part_$gpu.json") ;;
        *) echo "unknown step $name" >&2; exit 2 ;;
    esac
    timeout -s INT -k 15 "$secs" "${cmd[@]}" > "$OUT/$name.log" 2>&1   # KILL 15 s after INT: a hung GPU process
    echo "exit $? $(date +%T)" | tee -a "$OUT/session.log"
    tail -5 "$OUT/$name.log"
done
