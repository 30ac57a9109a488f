#!/usr/bin/env bash
# On a GPU machine: the Python module's tests (tests/python), the GPU ones
# included: torch CUDA tensors through EngramTables.lookup, eager and in a
# torch CUDA graph, bitwise equal to reference_lookup for each placement one
# GPU holds (tests/python/test_engram_tables_gpu.py). Builds engramlab and
# the module (build-gpu, tools/lib/gpu_build.sh: no emulator, no GoogleTest,
# machine code for CUDA_ARCHS, default 90) against the python3 on PATH (the
# one holding torch), then runs pytest on every file: without the emulator
# the scenario tests skip, and the CPU-only EngramTables tests skip where
# ranks have a GPU, each saying why. Logs go to $OUT (the device tool's
# folder) or build-gpu/out. Exit 0 only when the build and pytest passed.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset XDG_RUNTIME_DIR
build=build-gpu
out="${OUT:-$build/out}"
mkdir -p "$out"
jobs=$(nproc); [ "$jobs" -gt 16 ] && jobs=16
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }

python=$(command -v python3)
echo "gpu_python: $python $("$python" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__,
  "cuda", torch.version.cuda, "GPUs", torch.cuda.device_count())' 2>&1)"
gpu_build_args=(-DPython3_EXECUTABLE="$python" -DENGRAM_BUILD_TESTS=OFF)
. tools/lib/gpu_build.sh
gpu_build gpu_python engramlab engramlab_python || exit 1
grep -E "engramlab: Python module" "$build/configure.log"
cp "$build/configure.log" "$build/build.log" "$out/" 2>/dev/null
if [ "$build_rc" -ne 0 ] || [ ! -f "$build/python/python_env.sh" ]; then
  echo "gpu_python: FAILED: the module did not build (logs in $out)"
  exit 1
fi

PYTHONPATH="$PWD/$build/python" PYTHONUNBUFFERED=1 timeout 400 "$python" -m pytest -v -rs -p no:cacheprovider \
  tests/python > "$out/pytest.log" 2>&1
rc=$?
grep -E "PASSED|FAILED|ERROR|SKIPPED" "$out/pytest.log" | sed -E 's/^tests\/python\///' | head -80
tail -n 1 "$out/pytest.log"
if [ $rc -ne 0 ]; then
  grep -E -B2 -A30 "^_{5,} .* _{5,}$" "$out/pytest.log" | head -150
  echo "gpu_python: FAILED (pytest rc $rc at $(elapsed) s; log $out/pytest.log)"
  exit 1
fi
echo "gpu_python: OK at $(elapsed) s"
