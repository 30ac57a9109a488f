# Sourced by the GPU scripts after they cd to the repository root: what each
# sets up first. NVLink multicast off (on shared hosts it can take the GPUs
# out of service); build=build-gpu, out=$OUT (the device tool's folder) or
# build-gpu/out, both made; jobs = the cores, at most 16; elapsed prints the
# seconds since this was sourced.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
build=build-gpu
out="${OUT:-$build/out}"
mkdir -p "$out" "$build"
jobs=$(nproc); [ "$jobs" -gt 16 ] && jobs=16
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
