#!/usr/bin/env bash
# On a GPU machine (the lent 2 x H200): builds and runs the three probes
# behind docs/perf_notes.md, each printing a table: what the timing method
# costs by itself and a plain gather on cudaMalloc vs VMM memory
# (graph_timing_probe), the collective path with both GPUs in one process vs
# one process per GPU (nccl_process_probe), and where a peer gather's time
# goes, piece by piece (peer_gather_probe). About 80 s after the build.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
build=build-gpu
jobs=$(nproc); [ "$jobs" -gt 16 ] && jobs=16
mkdir -p "$build"
. tools/lib/nccl_env.sh
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DENGRAM_BUILD_EMULATOR="${GPU_BUILD_EMULATOR:-OFF}" \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" "${nccl_args[@]}" > "$build/probes-configure.log" 2>&1 || {
  tail -30 "$build/probes-configure.log"; exit 1; }
cmake --build "$build" -j"$jobs" --target graph_timing_probe nccl_process_probe peer_gather_probe \
  > "$build/probes-build.log" 2>&1 || { grep -E "error" "$build/probes-build.log" | head -30; exit 1; }
rc=0
for probe in graph_timing_probe nccl_process_probe peer_gather_probe; do
  echo "== $probe"
  timeout 200 "$build/benchmarks/$probe" || rc=1
done
exit $rc
