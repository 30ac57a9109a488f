#!/usr/bin/env bash
# On a GPU machine, every GPU check of one change in one call (the device
# budget allows a few calls a session): one build of engram_gpu_tests,
# engramlab, exchange_worker and device_hasher_probe (tools/lib/gpu_build.sh),
# then with those binaries
#   1. tools/gpu_acceptance.sh (GPU tests, the hasher probe, acceptance of
#      every placement one GPU holds, the decode loop, the bridge),
#   2. with GPU_ALL_NCU=1, the device hasher's kernel and the plain kernel
#      under Nsight Compute (tools/gpu_hasher_profile.sh's reports),
#   3. `bench` at the one-layer V4.1 size, device placements against the
#      one-process kernels over a table of the same rows (like with like),
#   4. both layers' lookups beside a cuBLAS product
#      (benchmarks/lookup_beside_compute_probe),
#   5. benchmarks/host_fill_probe (16 GiB in /dev/shm: page population
#      against the row stores), then `acceptance` of host_shared at the
#      one-layer V4.1 size (94.4 GiB in /dev/shm, where it fits): the fill
#      and registration times; then host_private at that size (anonymous
#      memory with MADV_HUGEPAGE) where the RAM allows.
# Each step's log goes to $OUT (or build-gpu/out); ends with one table.
# Steps are time-boxed so the whole stays under the tool's 600 s.
set -uo pipefail
cd "$(dirname "$0")/.."
. tools/lib/gpu_script.sh
. tools/lib/gpu_build.sh
gpu_build gpu_all engram_gpu_tests engramlab exchange_worker device_hasher_probe lookup_beside_compute_probe \
  host_fill_probe || exit 1
bin="$PWD/$build/bin-all"
mkdir -p "$bin"
ln -sf "$PWD/$build/tests/gpu/engram_gpu_tests" "$PWD/$build/apps/engramlab" "$PWD/$build/tests/exchange_worker" \
  "$PWD/$build/benchmarks/device_hasher_probe" "$bin/"
build_s=$(elapsed)

BIN_DIR="$bin" timeout 330 tools/gpu_acceptance.sh > "$out/acceptance.txt" 2>&1
acceptance_rc=$?
sed -n '/^| check | result |/,$p' "$out/acceptance.txt"
acceptance_s=$(elapsed)

ncu_note="no ncu"
if [ "${GPU_ALL_NCU:-0}" = 1 ] && command -v ncu > /dev/null; then
  timeout 90 ncu --clock-control none --kernel-name regex:request_hash_kernel --launch-skip 25 --launch-count 1 \
    --set full --print-details all "$bin/device_hasher_probe" 30 8192 > "$out/ncu_request_hash_kernel.txt" 2>&1
  ncu_note="rc $?"
  timeout 40 ncu --clock-control none --kernel-name regex:plain_ids_kernel --launch-skip 25 --launch-count 1 \
    --section SpeedOfLight --section LaunchStats --section Occupancy \
    "$bin/device_hasher_probe" 30 8192 > "$out/ncu_plain_ids_kernel.txt" 2>&1
  grep -hE "Duration|Registers Per Thread|Achieved Occupancy|Warp Cycles Per Issued Instruction|Static Shared" \
    "$out"/ncu_*.txt | head -12
fi
ncu_s=$(elapsed)

like_rc=127
left=$(( 585 - $(elapsed) ))
if [ "$left" -gt 60 ]; then
  timeout "$left" "$bin/engramlab" launch -n 1 -- "$bin/engramlab" bench --model deepseek-v4.1-flash-layer1 \
    --placements device_peer,device_collective --svg "$out/bench_layer1.svg" --csv "$out/bench_layer1.csv" \
    > "$out/bench_layer1.txt" 2> "$out/bench_layer1.err"
  like_rc=$?
  grep -A8 "runtime / one-process" "$out/bench_layer1.txt"; tail -3 "$out/bench_layer1.err"
fi
beside_rc=127
if [ $(( 585 - $(elapsed) )) -gt 60 ]; then
  timeout 60 "$PWD/$build/benchmarks/lookup_beside_compute_probe" 8 8192 4 > "$out/beside_compute.txt" 2>&1
  beside_rc=$?
  tail -22 "$out/beside_compute.txt"
fi
beside_s=$(elapsed)

# Where a host table's fill goes: 16 GiB of one-layer rows in /dev/shm,
# populated or faulted, against the stores' own ceiling.
fill_rc=127
if [ $(( 585 - $(elapsed) )) -gt 150 ]; then
  timeout 60 "$PWD/$build/benchmarks/host_fill_probe" 16 > "$out/host_fill_probe.txt" 2>&1
  fill_rc=$?
  cat "$out/host_fill_probe.txt"
fi

# acceptance of one host placement at the one-layer V4.1 size when FREE_GIB
# (of /dev/shm or RAM) holds it and time is left; its rc in host_acceptance_rc.
host_acceptance() {
  local placement="$1" free_gib="$2"
  host_acceptance_rc=127
  local left=$(( 585 - $(elapsed) ))
  [ "${free_gib:-0}" -ge 100 ] && [ "$left" -gt 90 ] || return 0
  timeout "$left" "$bin/engramlab" launch -n 1 -- "$bin/engramlab" acceptance --placement "$placement" --cpu-offload \
    --model deepseek-v4.1-flash-layer1 --tokens 1,64,1024,8192 > "$out/${placement}_layer1.txt" 2>&1
  host_acceptance_rc=$?
  grep -E "PASS|FAIL|filled|error|tokens (1|64|1024|8192):" "$out/${placement}_layer1.txt" | head -8
}
shm_free_gib=$(df -BG --output=avail /dev/shm 2>/dev/null | tail -1 | tr -dc 0-9)
host_acceptance host_shared "$shm_free_gib"
host_rc=$host_acceptance_rc
# The same layer as a host_private table (anonymous memory with
# MADV_HUGEPAGE, 94.4 GiB of the machine's RAM).
mem_free_gib=$(awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo)
host_acceptance host_private "$mem_free_gib"
private_rc=$host_acceptance_rc
echo
echo "| step | result |"
echo "| --- | --- |"
echo "| build | rc $build_rc, $build_s s |"
echo "| gpu_acceptance.sh | rc $acceptance_rc, at $acceptance_s s |"
echo "| ncu of the hasher | $ncu_note, at $ncu_s s |"
echo "| bench, one-layer V4.1, device placements | rc $like_rc |"
echo "| lookups beside a cuBLAS product | rc $beside_rc, at $beside_s s |"
echo "| host_fill_probe, 16 GiB | rc $fill_rc |"
echo "| acceptance host_shared, one-layer V4.1 (/dev/shm ${shm_free_gib:-?} GiB free) | rc $host_rc |"
echo "| acceptance host_private, one-layer V4.1 (${mem_free_gib:-?} GiB of RAM available) | rc $private_rc, at $(elapsed) s |"
# On the device machine ($OUT set) the logs come back as one archive: it
# returns only so many files.
if [ -n "${OUT:-}" ]; then
  tar -czf "$build/logs.tgz" -C "$out" . && find "$out" -mindepth 1 -delete && mv "$build/logs.tgz" "$out/logs.tgz"
fi
