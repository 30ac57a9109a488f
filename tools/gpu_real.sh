#!/usr/bin/env bash
# On a GPU machine (the lent 2 x H200), after tools/gpu_bench.sh built
# build-gpu: the device placements on REAL processes. `engramlab scenario run
# --real` launches one process per GPU for each scenario of scenarios/real/
# h200x2_*; the handle exchange passes POSIX fds of cuMemCreate allocations
# between them over the Unix socket, every lookup is compared byte for byte
# with the emulator. Then `engramlab doctor`. Exit 0 only when the three scenarios
# passed (a skip is a failure here: this machine is meant to have the GPUs)
# and doctor ran. Takes well under 60 s once engramlab is built.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# A stuck collective or fd transfer ends the ranks within this, on their own
# (they run in their own process group, beyond `timeout`'s reach).
export ENGRAMLAB_OP_TIMEOUT_MS="${ENGRAMLAB_OP_TIMEOUT_MS:-15000}"
# The fd channel's sockets: /tmp/engramlab-<uid>/<job id> (writable wherever
# the runner's /tmp result directories are), not a runtime dir that a
# container may name without providing.
unset XDG_RUNTIME_DIR
# NCCL from the Python wheel, as gpu_bench.sh found it (engramlab links it):
# its lib/ on LD_LIBRARY_PATH.
. tools/lib/nccl_env.sh
build="${BUILD:-build-gpu}"
lab="$build/apps/engramlab"
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }

if [ -f "$build/CMakeCache.txt" ]; then
  # Up to date after gpu_bench.sh: a no-op then.
  jobs=$(nproc); [ "$jobs" -gt 16 ] && jobs=16
  cmake --build "$build" -j"$jobs" --target engramlab > "$build/gpu_real_build.log" 2>&1 \
    || { grep -E "error" "$build/gpu_real_build.log" | head -20; echo "gpu_real: building engramlab FAILED"; exit 1; }
fi
if [ ! -x "$lab" ]; then
  echo "gpu_real: $lab is missing: run tools/gpu_bench.sh first (it configures and builds $build)"; exit 1
fi
if ! ls "$build"/backends/libengram_cuda_backend.a > /dev/null 2>&1; then
  echo "gpu_real: $build has no CUDA backend (nvcc not found at configure time?): device placements would skip"; exit 1
fi

if grep -q "^ENGRAM_BUILD_EMULATOR:BOOL=OFF" "$build/CMakeCache.txt" 2>/dev/null; then
  echo "gpu_real: $build was configured with -DENGRAM_BUILD_EMULATOR=OFF: \`scenario run --real\` compares with the" \
       "emulator, which this build lacks (GPU_BUILD_EMULATOR=ON tools/gpu_bench.sh builds it, given Boost.Context)"
  exit 1
fi

scenarios=(scenarios/real/h200x2_device_peer.yaml scenarios/real/h200x2_device_collective.yaml
           scenarios/real/h200x2_device_head_sharded.yaml)
echo "gpu_real: $lab scenario run --real ${scenarios[*]}"
timeout -k 3 38 "$lab" scenario run --real "${scenarios[@]}" > "$build/gpu_real.txt" 2>&1
real_rc=$?
cat "$build/gpu_real.txt"
echo "gpu_real: scenario run --real rc $real_rc at $(elapsed) s"
all_passed=0
grep -q "^3 passed, 0 skipped, 0 failed of 3 scenarios on real processes" "$build/gpu_real.txt" && all_passed=1

echo "gpu_real: $lab doctor"
timeout -k 3 12 "$lab" doctor 2>&1
doctor_rc=$?
echo "gpu_real: doctor rc $doctor_rc at $(elapsed) s"
[ -n "${OUT:-}" ] && cp "$build/gpu_real.txt" "$OUT/gpu_real.txt" 2>/dev/null

if [ $real_rc -ne 0 ] || [ $all_passed -ne 1 ] || [ $doctor_rc -ne 0 ]; then
  echo "gpu_real: FAILED (scenario rc $real_rc, all passed: $all_passed, doctor rc $doctor_rc)"
  exit 1
fi
echo "gpu_real: OK: the three device scenarios equal the emulator on real processes"
