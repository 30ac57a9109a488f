#!/usr/bin/env bash
# On a GPU machine (the lent 2 x H200): configure and build the GPU targets
# and engramlab, run tests/gpu and `engramlab doctor`, print a short table.
# Logs go to $OUT (the device tool's folder) or build-gpu/out.
# NVLink multicast stays off: it can take a shared host's GPUs out of service.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
build=build-gpu
out="${OUT:-$build/out}"
mkdir -p "$out"
jobs=$(nproc); [ "$jobs" -gt 16 ] && jobs=16

nvidia-smi -L 2>&1 | tee "$out/gpus.txt"
nvidia-smi topo -m > "$out/topo.txt" 2>&1

# NCCL: the toolkit's when it has one, else the Python wheel's (nvidia-nccl-cu13).
. tools/lib/nccl_env.sh
echo "gpu_check: NCCL ${nccl_args[*]:-from the system}"

t0=$(date +%s)
# No emulator (the GPU image has no Boost.Context): tools/lib/gpu_build.sh says why.
if ! cmake -S . -B "$build" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release -DENGRAM_BUILD_EMULATOR="${GPU_BUILD_EMULATOR:-OFF}" \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" "${nccl_args[@]}" > "$out/configure.log" 2>&1; then
  tail -40 "$out/configure.log"; echo "gpu_check: configure FAILED"; exit 1
fi
# -k: a broken engramlab source must not stop the GPU tests, nor the reverse.
cmake --build "$build" -j"$jobs" --target engram_gpu_tests engramlab -- -k > "$out/build.log" 2>&1
build_rc=$?
t1=$(date +%s)
[ $build_rc -ne 0 ] && grep -E "error|Error" "$out/build.log" | head -30
grep -E "engramlab: CUDA parts" "$out/configure.log"; grep -E "ENGRAM_NCCL" "$build/CMakeCache.txt" | grep -v ADVANCED

tests_bin="$build/tests/gpu/engram_gpu_tests"
tests_rc=127
if [ -x "$tests_bin" ]; then
  timeout 300 "$tests_bin" --gtest_output=xml:"$out/gpu_tests.xml" > "$out/gpu_tests.log" 2>&1
  tests_rc=$?
  grep -E "^\[  (FAILED|SKIPPED) |Failure|Expected|Which is|differ|GPU [0-9]+( of [0-9]+)?:|MultiGpuLookup:|FABRIC probe|delta|Skipped|^no GPU" \
    "$out/gpu_tests.log" | head -60
fi
t2=$(date +%s)

sanitizer_rc=skipped
if [ -x "$tests_bin" ] && command -v compute-sanitizer > /dev/null; then
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$tests_bin" --gtest_filter='GatherKernels.*' \
    > "$out/memcheck.log" 2>&1
  sanitizer_rc=$?
  grep -E "ERROR SUMMARY|Invalid" "$out/memcheck.log" | head -5
fi

doctor_rc=127
if [ -x "$build/apps/engramlab" ]; then
  "$build/apps/engramlab" doctor > "$out/doctor.txt" 2>&1
  doctor_rc=$?
  cat "$out/doctor.txt"
fi

echo
echo "| check | result |"
echo "| --- | --- |"
echo "| build (engram_gpu_tests, engramlab) | rc $build_rc, $((t1 - t0)) s |"
if [ -f "$out/gpu_tests.log" ]; then
  while read -r status name time; do
    echo "| $name | $status $time |"
  done < <(sed -nE 's/^\[ +(OK|FAILED|SKIPPED) +\] ([A-Za-z0-9_.\/]+) (\([0-9]+ ms\))$/\1 \2 \3/p' "$out/gpu_tests.log")
fi
echo "| engram_gpu_tests | rc $tests_rc, $((t2 - t1)) s |"
echo "| memcheck GatherKernels.* | rc $sanitizer_rc |"
echo "| engramlab doctor | rc $doctor_rc |"
[ $build_rc -eq 0 ] && [ $tests_rc -eq 0 ] && [ $doctor_rc -eq 0 ]
