#!/usr/bin/env bash
# On a GPU machine: a fresh bench run held to the step model's bounds
# (issue 49). Builds engramlab (tools/lib/gpu_build.sh), runs `bench --csv`
# over the one-layer V4.1 table with every placement this machine's ranks
# get (launch -n $RANKS, default every GPU), then
# `plan --calibration-check --calibration bench.csv`: each measured p50
# against the built-in model, within 1.25x for device placements and 1.5x
# for host placements; and `plan --calibration bench.csv` for the fit's
# error per series and size. Exit 1 where a point is outside its bound.
# Logs to $OUT (or build-gpu/out).
set -uo pipefail
cd "$(dirname "$0")/.."
. tools/lib/gpu_script.sh
. tools/lib/gpu_build.sh
gpu_build step_cost engramlab || exit 1
lab="$PWD/$build/apps/engramlab"
ranks="${RANKS:-$(nvidia-smi -L | wc -l)}"
timeout 480 "$lab" launch -n "$ranks" -- "$lab" bench --model deepseek-v4.1-flash-layer1 \
  --tokens 1,64,1024,8192 --csv "$out/bench.csv" > "$out/bench.txt" 2> "$out/bench.err"
echo "step_cost: bench rc $? at $(elapsed) s"
"$lab" plan --tp 1 --dp "$ranks" --gpu-model H200 --calibration "$out/bench.csv" --calibration-check \
  | tee "$out/calibration_check.txt"
check_rc=${PIPESTATUS[0]}
"$lab" plan --tp 1 --dp "$ranks" --gpu-model H200 --calibration "$out/bench.csv" --tokens 1,64,1024,8192 \
  > "$out/calibration_fit.txt" 2>&1
echo "step_cost: check rc $check_rc (0: every point within its bound) at $(elapsed) s"
exit "$check_rc"
