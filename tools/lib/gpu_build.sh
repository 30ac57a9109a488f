# Sourced by the GPU scripts: gpu_build LABEL TARGET... configures "$build"
# from source on the GPU machine and builds only TARGETs, printing
# LABEL-prefixed progress. Sets build_rc; returns 1 only when configure fails
# (a failed build still leaves what did build); the configure log names
# every missing package.
#   - Release, against tools/lib/nccl_env.sh's NCCL
#   - without the emulator (-DENGRAM_BUILD_EMULATOR=OFF: no Boost.Context,
#     which the GPU image lacks); GPU_BUILD_EMULATOR=ON builds it too
#   - machine code for CUDA_ARCHS (default 90, the H200; "90;100;103" for
#     Blackwell too, slower to build)
# Needs: $build, $jobs, and an elapsed function, from the caller (tools/lib/gpu_script.sh sets them); more CMake
# arguments in the array gpu_build_args, when the caller sets it.
gpu_build() {
  local label="$1"; shift
  mkdir -p "$build"
  # NCCL: the toolkit's when it has one, else the Python wheel's (nvidia-nccl-cu13).
  . tools/lib/nccl_env.sh
  echo "$label: NCCL ${nccl_args[*]:-from the system}"
  echo "$label: configure $build (emulator ${GPU_BUILD_EMULATOR:-OFF}, CUDA archs ${CUDA_ARCHS:-90}), build $* with -j$jobs"
  if ! cmake -S . -B "$build" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release \
      -DENGRAM_BUILD_EMULATOR="${GPU_BUILD_EMULATOR:-OFF}" -DENGRAM_BUILD_TESTS=ON \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" "${nccl_args[@]}" ${gpu_build_args[@]+"${gpu_build_args[@]}"} \
      > "$build/configure.log" 2>&1; then
    grep -E -A12 "CMake Error" "$build/configure.log" | head -40
    echo "$label: configure FAILED (log: $build/configure.log)"
    build_rc=1
    return 1
  fi
  grep -E "engramlab: CUDA parts" "$build/configure.log"
  if ! grep -q "engramlab: CUDA parts ON" "$build/configure.log"; then
    echo "$label: configure found no CUDA (nvcc, CUDAToolkit): the GPU targets would not exist"
    build_rc=1
    return 1
  fi
  cmake --build "$build" -j"$jobs" --target "$@" -- -k > "$build/build.log" 2>&1
  build_rc=$?
  echo "$label: build rc $build_rc at $(elapsed) s"
  [ $build_rc -ne 0 ] && grep -E "error|Error [0-9]" "$build/build.log" | head -30
  return 0
}
