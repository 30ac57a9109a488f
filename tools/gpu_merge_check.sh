#!/usr/bin/env bash
# On the GPU machine, the GPU checks of the emulated driver, engine rules and
# idle-rank changes in one call: builds the GPU tests and the emulated
# driver, then runs the real-vs-emulated driver agreement test, the gather
# kernels under every engine rule, and the whole GPU test binary; a table at
# the end.
set -uo pipefail
cd "$(dirname "$0")/.."
. tools/lib/gpu_script.sh
. tools/lib/gpu_build.sh
gpu_build merge_check engram_gpu_tests engramlab emulated_rank_worker engram_emulated_cuda engram_emulated_nvml \
  exchange_worker || exit 1
t=build-gpu/tests/gpu/engram_gpu_tests
[ -x "$build/tests/gpu/engram_gpu_tests" ] && t="$build/tests/gpu/engram_gpu_tests"
timeout 120 "$t" --gtest_filter='EmulatedDriverAgreement.*' > "$out/agreement.txt" 2>&1; a=$?
timeout 120 "$t" --gtest_filter='GatherKernels*' > "$out/gather.txt" 2>&1; g=$?
timeout 300 "$t" > "$out/gpu_all.txt" 2>&1; all=$?
tail -40 "$out/agreement.txt"; grep -E '^\[  (PASSED|FAILED)|tests ran' "$out"/*.txt
echo "| check | rc |"; echo "| agreement | $a |"; echo "| gather kernels | $g |"; echo "| all gpu tests | $all |"
