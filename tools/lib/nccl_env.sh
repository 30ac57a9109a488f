# Sourced by the GPU scripts: which NCCL to build against. The toolkit's (or
# the system's) when it has one, else the Python wheel's (nvidia-nccl-cu13):
# then sets nccl_args to the CMake cache entries that point at the wheel and
# puts its lib/ on LD_LIBRARY_PATH. nccl_args stays empty otherwise.
nccl_args=()
if [ ! -f /usr/local/cuda/include/nccl.h ] && [ ! -f /usr/include/nccl.h ]; then
  wheel=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null \
          || python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
  if [ -n "$wheel" ] && [ -f "$wheel/include/nccl.h" ]; then
    lib=$(ls "$wheel"/lib/libnccl.so* | head -1)
    nccl_args=(-DENGRAM_NCCL_INCLUDE_DIR="$wheel/include" -DENGRAM_NCCL_LIBRARY="$lib")
    export LD_LIBRARY_PATH="$wheel/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
fi
