// What every gather launch shares, host side (kernels/gather_launch.cu): the
// argument checks (the row layout, the shard gather's arguments, the host
// kernels' head window), the alignment rules that pick the vector path, the
// grid of a warp-per-row launch and a launch's error (the timing and bench
// kernels' too). Internal to kernels/; plain C++ header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/base/status.h"
#include "kernels/gather_kernels.h"

namespace engram::kernels::detail {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreadsPerBlock = kWarpsPerBlock * 32;
constexpr int kFastDim = 256;  // the V4.1 row: 256 FP8 values

// `kernel` names the call in every message ("gather_peer: ...").
Status check_layout(const RowLayout& layout, const char* kernel);
// gather_peer and gather_peer_variant.
Status check_peer_args(const GatherPeerArgs& args);
// The host kernels: the layout, tokens >= 0 and heads [head_begin,
// head_begin + head_count) inside the ids_per_token ids of a token.
Status check_head_window(const HostRowsArgs& args, const char* kernel);

// ok, or kInternal with the CUDA error of the last launch.
Status launch_status(const char* kernel);

bool aligned(const void* p, uintptr_t alignment);
// The 8-byte-load path needs every row start 8-byte aligned (stride and
// bases) and, for FP8, the output rows 16-byte aligned.
bool can_vectorise(const RowLayout& layout, const uint16_t* out);
// FP8, dim 256: the V4.1 fast path's rows (kernels/v41_fast_path.h).
bool is_fast_row(const RowLayout& layout);

// Blocks of kWarpsPerBlock warps, `rows` slots per warp, for `row_slots`
// slots; kInvalidArgument past one launch's grid.
Result<dim3> row_grid(int64_t row_slots, int rows, const char* kernel);

}  // namespace engram::kernels::detail
