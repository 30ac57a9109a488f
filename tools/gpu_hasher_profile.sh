#!/usr/bin/env bash
# On a GPU machine: the device hasher's probe (benchmarks/device_hasher_probe)
# timed, then its step kernel and the plain kernel it is held against
# profiled by Nsight Compute (one launch each at 8,192 tokens, every
# section), each report written as text to $OUT (or build-gpu/out). The
# numbers behind docs/perf_notes.md's device hasher entries.
set -uo pipefail
cd "$(dirname "$0")/.."
build=build-gpu
out="${OUT:-$build/out}"
mkdir -p "$out"
jobs=$(nproc); [ "$jobs" -gt 16 ] && jobs=16
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
. tools/lib/gpu_build.sh
gpu_build gpu_hasher_profile device_hasher_probe || exit 1
[ "$build_rc" -ne 0 ] && exit 1
probe="$PWD/$build/benchmarks/device_hasher_probe"
"$probe" 300 | tee "$out/probe.txt"
rc=0
for kernel in request_hash_kernel plain_ids_kernel; do
  # Past the warm-up launches of the 8,192-token shapes: a warm L2, as timed.
  if timeout 200 ncu --clock-control none --kernel-name "regex:$kernel" --launch-skip 25 --launch-count 1 --set full \
      --print-details all "$probe" 30 8192 >"$out/ncu_$kernel.txt" 2>&1; then
    echo "ncu $kernel: $out/ncu_$kernel.txt"
  else
    echo "ncu $kernel FAILED: tail of $out/ncu_$kernel.txt"; tail -20 "$out/ncu_$kernel.txt"; rc=1
  fi
done
grep -hE "^  [a-z_]+kernel|Duration|Registers Per Thread|Static Shared Memory Per Block|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued Instruction|Block Limit (Shared|Registers)" \
  "$out"/ncu_*.txt | head -40
echo "gpu_hasher_profile: done at $(elapsed) s"
exit $rc
