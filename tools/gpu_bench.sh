#!/usr/bin/env bash
# On a GPU machine: build engramlab and the GPU tests, run tests/gpu, then
# `engramlab bench` under `engramlab launch`, one process per GPU: every
# placement the plan gives here timed through the runtime on the same ids,
# beside rank 0's one-process kernels and the same run's HBM, NVLink and
# pinned host-to-device copies (the default V4.1 table on 2+ GPUs where it
# fits; on one GPU, whose memory holds no V4.1 table, the small model for
# every placement and the one-layer V4.1 model for the device placements,
# like with like against the one-process kernels),
# then tools/gpu_real.sh (device placements on real processes, doctor) and a
# memcheck of the gather kernels if time allows. Results go to $OUT (the
# device tool's folder) or build-gpu/out: bench.txt, bench.csv,
# bench_latency.svg, tests.log.
# Builds from source on the GPU machine (tools/lib/gpu_build.sh): without the
# emulator (-DENGRAM_BUILD_EMULATOR=OFF: the GPU image has no Boost.Context),
# only engram_gpu_tests and engramlab, -j16, machine code for CUDA_ARCHS
# (default 90; CUDA_ARCHS="90;100;103" for Blackwell too). A configure that
# misses a package names it and the script stops. tools/gpu_real.sh compares
# real runs with the emulator, so it runs only in a build with the emulator
# (GPU_BUILD_EMULATOR=ON, where Boost.Context is installed).
# BIN_DIR=<folder holding engramlab and engram_gpu_tests> skips the build and
# runs carried binaries (set LD_LIBRARY_PATH to the libraries they need).
# Ends with a table; exit 0 only when build, GPU tests and bench passed.
# NVLink multicast stays off: it can take a shared host's GPUs out of service.
set -uo pipefail
cd "$(dirname "$0")/.."
. tools/lib/gpu_script.sh
export ENGRAMLAB_OP_TIMEOUT_MS="${ENGRAMLAB_OP_TIMEOUT_MS:-600000}"
unset XDG_RUNTIME_DIR

nvidia-smi -L 2>&1
nvidia-smi topo -m 2>&1 | head -4

build_rc=0
if [ -n "${BIN_DIR:-}" ]; then
  echo "gpu_bench: carried binaries from BIN_DIR=$BIN_DIR (no build)"
  tests_bin="$BIN_DIR/engram_gpu_tests"; lab="$BIN_DIR/engramlab"
  built_from="carried ($BIN_DIR)"
else
  . tools/lib/gpu_build.sh
  if ! gpu_build gpu_bench engram_gpu_tests engramlab; then
    echo
    echo "| check | result |"
    echo "| --- | --- |"
    echo "| configure $build (emulator ${GPU_BUILD_EMULATOR:-OFF}, CUDA archs ${CUDA_ARCHS:-90}) | FAILED: see above |"
    echo "gpu_bench: FAILED at configure"
    exit 1
  fi
  tests_bin="$build/tests/gpu/engram_gpu_tests"; lab="$build/apps/engramlab"
  built_from="built here (emulator ${GPU_BUILD_EMULATOR:-OFF}, CUDA archs ${CUDA_ARCHS:-90})"
fi
for bin in "$tests_bin" "$lab"; do
  [ -x "$bin" ] || { echo "gpu_bench: MISSING $bin"; build_rc=1; }
done
build_s=$(elapsed)

tests_rc=127
if [ -x "$tests_bin" ]; then
  timeout 150 "$tests_bin" > "$out/tests.log" 2>&1
  tests_rc=$?
  grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|Failure|differ|PASSED" "$out/tests.log" | head -40
fi
echo "gpu_bench: GPU tests rc $tests_rc at $(elapsed) s"

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
bench_rc=127
like_rc=127
if [ -x "$lab" ] && [ "$gpus" -ge 1 ]; then
  # One GPU holds no V4.1 table (188.8 GiB): the small model there for every
  # placement, the real one on 2+. (--model, not --table-model: every rank's
  # memory fit judges the placement model's tables, and V4.1's do not fit
  # one GPU.)
  table_args=()
  [ "$gpus" -lt 2 ] && table_args=(--model tiny)
  timeout 300 "$lab" launch -n "$gpus" -- "$lab" bench "${table_args[@]}" ${BENCH_ARGS:-} --variants \
    --svg "$out/bench_latency.svg" --csv "$out/bench.csv" > "$out/bench.txt" 2> "$out/bench.err"
  bench_rc=$?
  cat "$out/bench.txt"; tail -5 "$out/bench.err"
  echo "gpu_bench: bench ($gpus ranks) rc $bench_rc at $(elapsed) s"
  if [ "$gpus" -lt 2 ]; then
    # Like with like on one GPU: the one-layer V4.1 model (94.4 GiB, one
    # table set a GPU holds), its device placements timed through the
    # runtime beside the one-process kernels over a table of the same rows
    # (bench's default --reference-gib table), each built after the last is
    # given back.
    timeout 280 "$lab" launch -n 1 -- "$lab" bench --model deepseek-v4.1-flash-layer1 \
      --placements device_peer,device_collective --svg "$out/bench_layer1.svg" --csv "$out/bench_layer1.csv" \
      > "$out/bench_layer1.txt" 2> "$out/bench_layer1.err"
    like_rc=$?
    cat "$out/bench_layer1.txt"; tail -5 "$out/bench_layer1.err"
    echo "gpu_bench: bench at the one-layer V4.1 size rc $like_rc at $(elapsed) s"
  fi
fi

# Device placements on real processes vs the emulator, and doctor (under 60
# s): only where this build has the emulator to compare with.
real_rc=127
real_note="not run"
if [ -x "$lab" ] && [ -z "${BIN_DIR:-}" ] && ! grep -q "^ENGRAM_BUILD_EMULATOR:BOOL=ON" "$build/CMakeCache.txt"; then
  real_note="skipped: this build has no emulator (GPU_BUILD_EMULATOR=ON builds it)"
  timeout -k 3 12 "$lab" doctor > "$out/doctor.txt" 2>&1
  doctor_rc=$?
  real_note="$real_note; doctor rc $doctor_rc"
elif [ -x "$lab" ] && [ -z "${BIN_DIR:-}" ] && [ "$(elapsed)" -lt 500 ]; then
  timeout -k 5 60 tools/gpu_real.sh
  real_rc=$?
  real_note="rc $real_rc"
fi
echo "gpu_bench: gpu_real $real_note at $(elapsed) s"

# memcheck of the gather kernels with whatever time is left.
left=$(( 560 - $(elapsed) ))
memcheck_note="not run"
if [ -x "$tests_bin" ] && command -v compute-sanitizer > /dev/null && [ $left -gt 30 ]; then
  timeout $left compute-sanitizer --tool memcheck --error-exitcode 9 "$tests_bin" \
    --gtest_filter='GatherKernels.*:GatherFastPath.*' >> "$out/tests.log" 2>&1
  memcheck_note="rc $?"
  echo "gpu_bench: memcheck $memcheck_note at $(elapsed) s"
  grep -E "ERROR SUMMARY|Invalid" "$out/tests.log" | head -5
fi

echo
echo "| check | result |"
echo "| --- | --- |"
echo "| build: engram_gpu_tests, engramlab, $built_from | rc $build_rc, $build_s s |"
echo "| engram_gpu_tests | rc $tests_rc |"
echo "| bench ($gpus ranks) | rc $bench_rc (tables in $out/bench.txt) |"
[ "$like_rc" -ne 127 ] && echo "| bench, one-layer V4.1, device placements (like with like) | rc $like_rc ($out/bench_layer1.txt) |"
echo "| gpu_real (real processes vs emulator, doctor) | $real_note |"
echo "| memcheck of the gather kernels | $memcheck_note |"
if [ $build_rc -eq 0 ] && [ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ] && { [ $like_rc -eq 127 ] || [ $like_rc -eq 0 ]; }; then
  echo "gpu_bench: OK"
else
  echo "gpu_bench: FAILED (build rc $build_rc, engram_gpu_tests rc $tests_rc, bench rc $bench_rc; logs in $out)"
  exit 1
fi
