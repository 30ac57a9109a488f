#!/usr/bin/env bash
# On a GPU machine (the lent 2 x H200): build engramlab and the GPU tests,
# run tests/gpu, then `engramlab bench --variants` (warm L2: the final table
# plus the method's fixed cost and the peer-kernel variant sweep, every variant
# checked bitwise against gather_peer), then the L2-scrubbed bench,
# tools/gpu_real.sh (device placements on real processes, doctor) and a
# memcheck of the gather kernels if time allows. Results go to
# $OUT (the device tool's folder) or build-gpu/out: bench.txt, bench.csv,
# bench_latency.svg, bench_cold.{txt,csv}, bench_cold_latency.svg, tests.log.
# NVLink multicast stays off: it can take a shared host's GPUs out of service.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
build=build-gpu
out="${OUT:-$build/out}"
mkdir -p "$out" "$build"
jobs=$(nproc); [ "$jobs" -gt 16 ] && jobs=16
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }

nvidia-smi -L 2>&1
nvidia-smi topo -m 2>&1 | head -4

. tools/lib/gpu_build.sh
gpu_build gpu_bench || exit 1

tests_bin="$build/tests/gpu/engram_gpu_tests"
tests_rc=127
if [ -x "$tests_bin" ]; then
  timeout 150 "$tests_bin" > "$out/tests.log" 2>&1
  tests_rc=$?
  grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|Failure|differ|PASSED" "$out/tests.log" | head -40
fi
echo "gpu_bench: GPU tests rc $tests_rc at $(elapsed) s"

bench_rc=127
cold_rc=127
lab="$build/apps/engramlab"
if [ -x "$lab" ]; then
  timeout 150 "$lab" bench --variants --svg "$out/bench_latency.svg" --csv "$out/bench.csv" > "$out/bench.txt" 2> "$build/bench.err"
  bench_rc=$?
  cat "$out/bench.txt"; tail -5 "$build/bench.err"
  echo "gpu_bench: bench rc $bench_rc at $(elapsed) s"
  [ "$(elapsed)" -lt 250 ] && timeout 80 "$lab" bench --cold-l2 --svg "$out/bench_cold_latency.svg" --csv "$out/bench_cold.csv" \
    > "$out/bench_cold.txt" 2> "$build/bench_cold.err"
  cold_rc=$?
  sed -n '/^| tokens | collective us | peer us | speedup/,/^$/p;/^targets/,/within/p' "$out/bench_cold.txt"
  tail -3 "$build/bench_cold.err"
  echo "gpu_bench: cold bench rc $cold_rc at $(elapsed) s"
fi

# Device placements on real processes vs the emulator, and doctor (under 60 s).
real_rc=127
if [ -x "$lab" ] && [ "$(elapsed)" -lt 320 ]; then
  timeout -k 5 60 tools/gpu_real.sh
  real_rc=$?
fi
echo "gpu_bench: gpu_real rc $real_rc at $(elapsed) s"

# memcheck of the gather kernels with whatever time is left (the call's limit is 420 s).
left=$(( 390 - $(elapsed) ))
if [ -x "$tests_bin" ] && command -v compute-sanitizer > /dev/null && [ $left -gt 30 ]; then
  timeout $left compute-sanitizer --tool memcheck --error-exitcode 9 "$tests_bin" \
    --gtest_filter='GatherKernels.*:GatherFastPath.*' >> "$out/tests.log" 2>&1
  echo "gpu_bench: memcheck rc $? at $(elapsed) s"
  grep -E "ERROR SUMMARY|Invalid" "$out/tests.log" | head -5
fi
[ $build_rc -eq 0 ] && [ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ]
