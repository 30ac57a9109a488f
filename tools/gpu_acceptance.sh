#!/usr/bin/env bash
# On a GPU machine: every GPU check of the device lookup in one call. Builds
# engram_gpu_tests, engramlab and device_hasher_probe (build-gpu), runs
# tests/gpu, the device hasher's probe (its step beside a plain kernel writing
# as many ids: a table, not a pass/fail), then `engramlab acceptance` (with
# its decode loop: ids hashed on the GPU and looked up in one replayed graph)
# under `engramlab launch`, one process per GPU, for the placements this
# machine can hold, and prints one table.
#   - 2 GPUs or more: device_peer (with the collective over the same shards)
#     device_collective and device_head_sharded at V4.1-Flash size; host_shared at V4.1 size
#     where /dev/shm holds a table; host_private with the small model
#     (a copy per rank does not fit: every rank's memory fit refuses V4.1's). host_head_sharded is chosen only where
#     /dev/shm is too small, so it runs in the emulated suite, not here.
#   - 1 GPU: every placement one rank can take (device_collective,
#     device_peer, host_private, device_head_sharded) with the small model (--model tiny: the
#     memory fit judges the placement model, and V4.1's tables fit no one GPU): the real kernels, NCCL,
#     registered host tables and graph replay, not the real size; then two
#     ranks sharing the GPU (--ranks-per-gpu 2) on device_peer, tiny and at
#     the one-layer V4.1 size (two 47.2 GiB shards), every slot vs the CPU.
#   - the bridge: `acceptance --file` with this machine's own entry
#     (`doctor --emit-host`) passes, and with a wrong GPU model and /dev/shm
#     size fails with exit 1 naming both values of each.
# Logs go to $OUT (the device tool's folder) or build-gpu/out.
# Builds from source on the GPU machine (tools/lib/gpu_build.sh): without the
# emulator (-DENGRAM_BUILD_EMULATOR=OFF: the GPU image has no Boost.Context),
# only engram_gpu_tests, engramlab, exchange_worker and device_hasher_probe, -j16, machine code for
# CUDA_ARCHS (default 90; CUDA_ARCHS="90;100;103" for Blackwell too). A
# configure that misses a package names it and the script stops.
# BIN_DIR=<folder holding engramlab, engram_gpu_tests, exchange_worker and device_hasher_probe>
# skips the build and runs carried binaries (set LD_LIBRARY_PATH to the
# libraries they need). Ends with a table; exit 0 only when every row passed.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export ENGRAMLAB_OP_TIMEOUT_MS="${ENGRAMLAB_OP_TIMEOUT_MS:-600000}"
unset XDG_RUNTIME_DIR
build=build-gpu
out="${OUT:-$build/out}"
mkdir -p "$out"
jobs=$(nproc); [ "$jobs" -gt 16 ] && jobs=16
. tools/lib/nccl_env.sh

t0=$(date +%s)
start=$t0
elapsed() { echo $(( $(date +%s) - start )); }
build_rc=0
if [ -n "${BIN_DIR:-}" ]; then
  echo "gpu_acceptance: carried binaries from BIN_DIR=$BIN_DIR (no build)"
  tests_path="$BIN_DIR/engram_gpu_tests"; lab="$BIN_DIR/engramlab"; exchange="$BIN_DIR/exchange_worker"
  probe="$BIN_DIR/device_hasher_probe"
  built_from="carried ($BIN_DIR)"
else
  . tools/lib/gpu_build.sh
  if ! gpu_build gpu_acceptance engram_gpu_tests engramlab exchange_worker device_hasher_probe; then
    echo
    echo "| check | result |"
    echo "| --- | --- |"
    echo "| configure $build (emulator ${GPU_BUILD_EMULATOR:-OFF}, CUDA archs ${CUDA_ARCHS:-90}) | FAILED: see above |"
    echo "gpu_acceptance: FAILED at configure"
    exit 1
  fi
  tests_path="$build/tests/gpu/engram_gpu_tests"; lab="$build/apps/engramlab"; exchange="$build/tests/exchange_worker"
  probe="$build/benchmarks/device_hasher_probe"
  built_from="built here (emulator ${GPU_BUILD_EMULATOR:-OFF}, CUDA archs ${CUDA_ARCHS:-90})"
fi
for bin in "$tests_path" "$lab" "$exchange" "$probe"; do
  [ -x "$bin" ] || { echo "gpu_acceptance: MISSING $bin"; build_rc=1; }
done
t1=$(date +%s)

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
shm_gib=$(df -BG --output=avail /dev/shm 2>/dev/null | tail -1 | tr -dc 0-9)
echo "gpu_acceptance: $gpus GPU(s), /dev/shm ${shm_gib:-0} GiB free"

tests_rc=127
if [ -x "$tests_path" ]; then
  timeout 400 "$tests_path" > "$out/gpu_tests.log" 2>&1
  tests_rc=$?
  grep -E "^\[  (FAILED|SKIPPED) |Failure|Expected|Which is" "$out/gpu_tests.log" | head -30
fi
t2=$(date +%s)

# The device hasher's step beside a plain kernel writing as many ids.
probe_rc=127
probe_target="not run"
if [ -x "$probe" ]; then
  timeout 120 "$probe" > "$out/device_hasher_probe.log" 2>&1
  probe_rc=$?
  cat "$out/device_hasher_probe.log"
  probe_target=$(grep -E "^target:" "$out/device_hasher_probe.log" | sed -E 's/^target: //')
fi
t3=$(date +%s)

rows=()
overall=0
# name, ranks, flags
accept() {
  local name="$1" n="$2"; shift 2
  local log="$out/acceptance_$name.log" s e rc
  s=$(date +%s)
  timeout 900 "$lab" launch -n "$n" -- "$lab" acceptance "$@" > "$log" 2>&1
  rc=$?
  e=$(date +%s)
  grep -E "MISMATCH|FAILED|PASS|FAIL|error" "$log" | head -12
  grep -E -A3 "decode loop: FAIL" "$log" | head -12
  grep -E "tokens (1|64|1024|8192):" "$log" | sed -E 's/^/    /' | head -16
  rows+=("| acceptance $name ($n ranks: $*) | rc $rc, $((e - s)) s |")
  [ $rc -ne 0 ] && overall=1
}
if [ -x "$lab" ]; then
  if [ "$gpus" -ge 2 ]; then
    accept device_peer 2 --peer-shards --tp 2
    accept device_collective 2 --tp 2
    accept device_head_sharded 2 --placement device_head_sharded --tp 2
    if [ "${shm_gib:-0}" -ge 190 ]; then
      accept host_shared 2 --cpu-offload --dp 2 --tp 1
    fi
    accept host_private 2 --cpu-offload --dp 2 --tp 1 --dp-shared-memory false --model tiny
  elif [ "$gpus" -eq 1 ]; then
    accept device_collective 1 --model tiny --tokens 1,64,1024,8192
    accept device_peer 1 --peer-shards --model tiny --tokens 1,64,1024,8192
    accept host_private 1 --cpu-offload --model tiny --tokens 1,64,1024,8192
    # vLLM's device layout, forced by name (the rules never pick it).
    accept device_head_sharded 1 --placement device_head_sharded --model tiny --tokens 1,64,1024,8192
    # Two ranks sharing the GPU (--ranks-per-gpu 2): the real exchange, mapping
    # and peer kernel across processes, every slot against the CPU reference
    # (no NCCL on a shared GPU), at the one-layer V4.1 size: two 47.2 GiB shards.
    accept device_peer_shared_gpu_tiny 2 --peer-shards --tp 2 --ranks-per-gpu 2 --model tiny
    accept device_peer_shared_gpu_v41_layer1 2 --peer-shards --tp 2 --ranks-per-gpu 2 \
      --model deepseek-v4.1-flash-layer1 --tokens 1,64,1024,8192
  fi
fi
# The bridge (issue 26): `acceptance --file` against this machine's own facts.
# The right file is `doctor --emit-host` here plus a layout (device_peer over
# up to 2 GPUs, the tiny table model); the wrong one names another GPU model
# and a 64 MiB /dev/shm, and must fail (exit 1) naming both values of each.
bridge_file() {  # bridge_file ENTRY RANKS > file
  local entry="$1" n="$2" r ranks="0"
  for ((r = 1; r < n; r++)); do ranks="$ranks, 0"; done
  echo "model: deepseek-v4.1-flash-layer1"
  echo "hosts:"
  printf '%s\n' "$entry" | sed 's/^/  /'
  echo "rank_hosts: [$ranks]"
  echo "layout: {tp: $n, dp: 1}"
  echo "config: {peer_shards: true}"
}
if [ -x "$lab" ] && [ "$gpus" -ge 1 ]; then
  n=$(( gpus >= 2 ? 2 : 1 ))
  entry=$("$lab" doctor --emit-host 2> "$out/bridge_emit_host.log")
  echo "$entry" > "$out/bridge_host_entry.yaml"
  real_model=$(printf '%s\n' "$entry" | sed -n 's/^ *gpu_model: *\([A-Za-z0-9]*\).*/\1/p')
  wrong_model=H100; [ "$real_model" = H100 ] && wrong_model=H200
  # 64 MiB, unless that is what this machine has (Docker's default).
  wrong_shm=64MiB wrong_shm_said="64 MiB"
  if printf '%s\n' "$entry" | grep -q "shm_size: 64MiB"; then wrong_shm=190GiB wrong_shm_said="190.0 GiB"; fi
  bridge_file "$entry" "$n" > "$out/bridge_right.yaml"
  printf '%s\n' "$entry" | sed -e '/^ *gpu_model:/d' -e "s/^\( *\)gpus: \(.*\)/\1gpus: \2\n\1gpu_model: $wrong_model/" \
    -e "s/^\( *\)shm_size: .*/\1shm_size: $wrong_shm/" > "$out/bridge_wrong_entry.yaml"
  bridge_file "$(cat "$out/bridge_wrong_entry.yaml")" "$n" > "$out/bridge_wrong.yaml"
  for which in right wrong; do
    log="$out/acceptance_bridge_$which.log"
    s=$(date +%s)
    timeout 300 "$lab" launch -n "$n" -- "$lab" acceptance --file "$out/bridge_$which.yaml" --table-model tiny \
      --tokens 1,64 > "$log" 2>&1
    rc=$?
    e=$(date +%s)
    grep -E "differs from|matches|PASS|FAIL" "$log" | head -8
    if [ "$which" = right ]; then
      rows+=("| acceptance --file, the right file (doctor --emit-host here, $n ranks, device_peer, tiny) | rc $rc, $((e - s)) s |")
      [ $rc -ne 0 ] && overall=1
    else
      named=no
      grep -q "gpu_model: the file says $wrong_model, this host has $real_model" "$log" &&
        grep -q "shm_size: the file says $wrong_shm_said, /dev/shm here is " "$log" && named=yes
      rows+=("| acceptance --file, a wrong file (gpu_model $wrong_model, shm_size $wrong_shm): exit 1 naming both values | rc $rc, both named: $named, $((e - s)) s |")
      { [ $rc -ne 1 ] || [ $named != yes ]; } && overall=1
    fi
  done
fi
# Two ranks on GPU 0 run the runtime's handle exchange with real VMM memory:
# real POSIX fds through the socket directory every rank resolves by default
# (no ENGRAMLAB_SOCKET_DIR, no XDG_RUNTIME_DIR).
if [ -x "$lab" ] && [ -x "${exchange:-}" ] && [ "$gpus" -ge 1 ]; then
  log="$out/exchange_default_dir.log"
  s=$(date +%s)
  env -u ENGRAMLAB_SOCKET_DIR timeout 120 "$lab" launch -n 2 -- "$exchange" --device cuda --bytes 67108864 > "$log" 2>&1
  rc=$?
  e=$(date +%s)
  ok=$(grep -c "EXCHANGE OK" "$log")
  grep -E "EXCHANGE|FAILED" "$log" | head -4
  rows+=("| handle exchange, 2 ranks sharing GPU 0, default socket dir | rc $rc, $ok of 2 EXCHANGE OK, $((e - s)) s |")
  { [ $rc -ne 0 ] || [ "$ok" -ne 2 ]; } && overall=1
fi

echo
echo "| check | result |"
echo "| --- | --- |"
echo "| build: engram_gpu_tests, engramlab, exchange_worker, device_hasher_probe, $built_from | rc $build_rc, $((t1 - t0)) s |"
echo "| engram_gpu_tests | rc $tests_rc, $((t2 - t1)) s |"
echo "| device_hasher_probe | rc $probe_rc, $((t3 - t2)) s: ${probe_target:-no target line} |"
for r in "${rows[@]}"; do echo "$r"; done
[ ${#rows[@]} -eq 0 ] && { echo "| acceptance | NOT RUN ($gpus GPUs, engramlab ${lab}) |"; overall=1; }
if [ $build_rc -eq 0 ] && [ $tests_rc -eq 0 ] && [ $probe_rc -eq 0 ] && [ $overall -eq 0 ]; then
  echo "gpu_acceptance: OK"
else
  echo "gpu_acceptance: FAILED (build rc $build_rc, engram_gpu_tests rc $tests_rc, device_hasher_probe rc $probe_rc, acceptance/exchange $overall; logs in $out)"
  exit 1
fi
