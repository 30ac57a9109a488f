#!/usr/bin/env bash
# On a GPU host with every GPU visible (written for the 8 x H200 one; works on
# any N >= 2): build the GPU tests and engramlab, run tests/gpu with a table
# shard of ENGRAMLAB_GPU_TEST_SHARD_GIB (default here 8) GiB per GPU, so the
# peer path is checked bitwise against the NCCL collective path over DP=N and
# against the CPU rule, eager and as graph replays; then `engramlab bench`
# (every visible GPU, 8 GiB shards). Results go to $OUT (the device tool's
# folder) or build-gpu/out: gpus.txt, topo.txt, tests.log, gpu_tests.xml,
# bench.txt, bench.csv, bench_latency.svg.
# NVLink multicast stays off: it can take a shared host's GPUs out of service.
set -uo pipefail
cd "$(dirname "$0")/.."
. tools/lib/gpu_script.sh
export ENGRAMLAB_GPU_TEST_SHARD_GIB="${ENGRAMLAB_GPU_TEST_SHARD_GIB:-8}"

nvidia-smi -L 2>&1 | tee "$out/gpus.txt"
nvidia-smi topo -m > "$out/topo.txt" 2>&1
gpus=$(grep -c '^GPU ' "$out/gpus.txt")
echo "gpu_multi: $gpus GPU(s) visible, test shard ${ENGRAMLAB_GPU_TEST_SHARD_GIB} GiB per GPU"

. tools/lib/gpu_build.sh
gpu_build gpu_multi engram_gpu_tests engramlab || exit 1

tests_bin="$build/tests/gpu/engram_gpu_tests"
tests_rc=127
if [ -x "$tests_bin" ]; then
  timeout 240 "$tests_bin" --gtest_output=xml:"$out/gpu_tests.xml" > "$out/tests.log" 2>&1
  tests_rc=$?
  grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|Failure|differ|PASSED|^MultiGpuLookup:|^CudaDeviceMemory:|^GPU [0-9]+ of" \
    "$out/tests.log" | head -60
fi
echo "gpu_multi: GPU tests rc $tests_rc at $(elapsed) s"

bench_rc=127
lab="$build/apps/engramlab"
if [ -x "$lab" ]; then
  timeout 240 "$lab" bench --svg "$out/bench_latency.svg" --csv "$out/bench.csv" > "$out/bench.txt" 2> "$out/bench.err"
  bench_rc=$?
  cat "$out/bench.txt"; tail -5 "$out/bench.err"
fi
echo "gpu_multi: bench rc $bench_rc at $(elapsed) s"
[ $build_rc -eq 0 ] && [ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ]
