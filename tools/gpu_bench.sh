#!/usr/bin/env bash
# On a GPU machine: build engramlab and the GPU tests, run tests/gpu, then
# `engramlab bench` under `engramlab launch`, one process per GPU: every
# placement the plan gives here timed through the runtime on the same ids,
# beside rank 0's one-process kernels and the same run's HBM, NVLink and
# pinned host-to-device copies (the default V4.1 table on 2+ GPUs where it
# fits; the small table model on one GPU, whose memory holds no V4.1 table),
# then tools/gpu_real.sh (device placements on real processes, doctor) and a
# memcheck of the gather kernels if time allows. Results go to $OUT (the
# device tool's folder) or build-gpu/out: bench.txt, bench.csv,
# bench_latency.svg, tests.log.
# Building needs Boost.Context (the emulator's fibers). On a machine without
# it, build elsewhere and set BIN_DIR to a folder holding engramlab and
# engram_gpu_tests (and LD_LIBRARY_PATH to the libraries they need).
# NVLink multicast stays off: it can take a shared host's GPUs out of service.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export ENGRAMLAB_OP_TIMEOUT_MS="${ENGRAMLAB_OP_TIMEOUT_MS:-600000}"
unset XDG_RUNTIME_DIR
build=build-gpu
out="${OUT:-$build/out}"
mkdir -p "$out" "$build"
jobs=$(nproc); [ "$jobs" -gt 16 ] && jobs=16
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }

nvidia-smi -L 2>&1
nvidia-smi topo -m 2>&1 | head -4

if [ -n "${BIN_DIR:-}" ]; then
  tests_bin="$BIN_DIR/engram_gpu_tests"; lab="$BIN_DIR/engramlab"; build_rc=0
else
  . tools/lib/gpu_build.sh
  gpu_build gpu_bench || exit 1
  tests_bin="$build/tests/gpu/engram_gpu_tests"; lab="$build/apps/engramlab"
fi

tests_rc=127
if [ -x "$tests_bin" ]; then
  timeout 150 "$tests_bin" > "$out/tests.log" 2>&1
  tests_rc=$?
  grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|Failure|differ|PASSED" "$out/tests.log" | head -40
fi
echo "gpu_bench: GPU tests rc $tests_rc at $(elapsed) s"

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
bench_rc=127
if [ -x "$lab" ] && [ "$gpus" -ge 1 ]; then
  # One GPU holds no V4.1 table (188.8 GiB): the small model there, the real one on 2+.
  table_args=()
  [ "$gpus" -lt 2 ] && table_args=(--table-model tiny)
  timeout 500 "$lab" launch -n "$gpus" -- "$lab" bench "${table_args[@]}" ${BENCH_ARGS:-} --variants \
    --svg "$out/bench_latency.svg" --csv "$out/bench.csv" > "$out/bench.txt" 2> "$out/bench.err"
  bench_rc=$?
  cat "$out/bench.txt"; tail -5 "$out/bench.err"
  echo "gpu_bench: bench ($gpus ranks) rc $bench_rc at $(elapsed) s"
fi

# Device placements on real processes vs the emulator, and doctor (under 60 s).
real_rc=127
if [ -x "$lab" ] && [ -z "${BIN_DIR:-}" ] && [ "$(elapsed)" -lt 500 ]; then
  timeout -k 5 60 tools/gpu_real.sh
  real_rc=$?
fi
echo "gpu_bench: gpu_real rc $real_rc at $(elapsed) s"

# memcheck of the gather kernels with whatever time is left.
left=$(( 560 - $(elapsed) ))
if [ -x "$tests_bin" ] && command -v compute-sanitizer > /dev/null && [ $left -gt 30 ]; then
  timeout $left compute-sanitizer --tool memcheck --error-exitcode 9 "$tests_bin" \
    --gtest_filter='GatherKernels.*:GatherFastPath.*' >> "$out/tests.log" 2>&1
  echo "gpu_bench: memcheck rc $? at $(elapsed) s"
  grep -E "ERROR SUMMARY|Invalid" "$out/tests.log" | head -5
fi
[ $build_rc -eq 0 ] && [ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ]
