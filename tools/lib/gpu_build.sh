# Sourced by the GPU scripts: gpu_build LABEL configures "$build" (Release,
# against tools/lib/nccl_env.sh's NCCL) and builds engram_gpu_tests and
# engramlab, printing LABEL-prefixed progress. Sets build_rc; returns 1 only
# when configure fails (a failed build still leaves what did build).
# Needs: $build, $jobs, and an elapsed function, from the caller.
gpu_build() {
  local label="$1"
  # NCCL: the toolkit's when it has one, else the Python wheel's (nvidia-nccl-cu13).
  . tools/lib/nccl_env.sh
  echo "$label: NCCL ${nccl_args[*]:-from the system}"
  if ! cmake -S . -B "$build" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release "${nccl_args[@]}" > "$build/configure.log" 2>&1; then
    tail -40 "$build/configure.log"; echo "$label: configure FAILED"; return 1
  fi
  grep -E "engramlab: CUDA parts" "$build/configure.log"
  cmake --build "$build" -j"$jobs" --target engram_gpu_tests engramlab -- -k > "$build/build.log" 2>&1
  build_rc=$?
  echo "$label: build rc $build_rc at $(elapsed) s"
  [ $build_rc -ne 0 ] && grep -E "error" "$build/build.log" | head -30
  return 0
}
