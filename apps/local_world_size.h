// `launch --nproc-per-node` as torchrun reads it: a number, or
//   gpu   the GPUs this process sees (an error when it sees none),
//   auto  the GPUs it sees, else the CPU count,
//   cpu   the CPU count.
// The GPUs seen: the NVIDIA driver's list (/proc/driver/nvidia/gpus, else
// `nvidia-smi -L`), narrowed by CUDA_VISIBLE_DEVICES where it is set, as
// CUDA narrows it (an empty value hides every GPU; the list ends at the
// first entry that names no GPU).
#pragma once

#include <string>
#include <string_view>

#include "core/base/status.h"

namespace engram::app {

// How many GPUs this process can use; 0 when none.
int visible_gpu_count();

// The ranks to start on this node; `flag` names the flag in errors.
Result<int> local_world_size(std::string_view text, std::string_view flag, int max_ranks);

}  // namespace engram::app
