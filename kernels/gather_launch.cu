#include "kernels/gather_launch.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

namespace engram::kernels::detail {

Status check_layout(const RowLayout& layout, const char* kernel) {
  if (layout.dim <= 0) return invalid_argument(fmt::format("{}: layout.dim {} must be positive", kernel, layout.dim));
  uint64_t needed = 0;
  if (layout.format == RowFormat::kFp8E4M3Ue8m0) {
    if (layout.dim % kScaleBlock != 0) {
      return invalid_argument(fmt::format("{}: layout.dim {} must be a multiple of {} for FP8 rows (one UE8M0 "
                                          "scale per {} values)", kernel, layout.dim, kScaleBlock, kScaleBlock));
    }
    needed = static_cast<uint64_t>(layout.dim) + static_cast<uint64_t>(layout.dim / kScaleBlock);
  } else {
    needed = static_cast<uint64_t>(layout.dim) * 2;
  }
  if (layout.row_bytes < needed) {
    return invalid_argument(fmt::format("{}: layout.row_bytes {} is smaller than a row of {} values ({} bytes)",
                                        kernel, layout.row_bytes, layout.dim, needed));
  }
  return Status::ok();
}

Status check_peer_args(const GatherPeerArgs& args) {
  ENGRAM_RETURN_IF_ERROR(check_layout(args.layout, "gather_peer"));
  if (args.tokens < 0 || args.heads <= 0) {
    return invalid_argument(fmt::format("gather_peer: tokens {} must be >= 0 and heads {} > 0", args.tokens, args.heads));
  }
  if (args.tokens == 0) return Status::ok();
  if (args.ids == nullptr || args.out == nullptr || args.shard_starts == nullptr || args.shard_bases == nullptr) {
    return invalid_argument("gather_peer: ids, out, shard_starts and shard_bases must be device pointers, not null");
  }
  if (args.shard_count <= 0) {
    return invalid_argument(fmt::format("gather_peer: shard_count {} must be positive", args.shard_count));
  }
  return Status::ok();
}

Status check_head_window(const HostRowsArgs& args, const char* kernel) {
  ENGRAM_RETURN_IF_ERROR(check_layout(args.layout, kernel));
  if (args.tokens < 0 || args.head_count <= 0 || args.head_begin < 0 ||
      args.head_begin + args.head_count > args.ids_per_token) {
    return invalid_argument(fmt::format("{}: tokens {} must be >= 0 and heads [{}, {}) inside the {} ids per token",
                                        kernel, args.tokens, args.head_begin, args.head_begin + args.head_count,
                                        args.ids_per_token));
  }
  return Status::ok();
}

Status launch_status(const char* kernel) {
  cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return Status::ok();
  return Status(ErrorCode::kInternal,
                fmt::format("{} launch failed: {} ({})", kernel, cudaGetErrorName(error), cudaGetErrorString(error)),
                ErrorContext{-1, -1, "launch"});
}

bool aligned(const void* p, uintptr_t alignment) { return reinterpret_cast<uintptr_t>(p) % alignment == 0; }

bool can_vectorise(const RowLayout& layout, const uint16_t* out) {
  if (layout.row_bytes % 8 != 0) return false;
  if (layout.format == RowFormat::kFp8E4M3Ue8m0) return layout.dim % 8 == 0 && aligned(out, 16);
  return layout.dim % 4 == 0 && aligned(out, 8);
}

bool is_fast_row(const RowLayout& layout) {
  return layout.format == RowFormat::kFp8E4M3Ue8m0 && layout.dim == kFastDim;
}

Result<dim3> row_grid(int64_t row_slots, int rows, const char* kernel) {
  const int64_t slots_per_block = static_cast<int64_t>(kWarpsPerBlock) * rows;
  const int64_t blocks = (row_slots + slots_per_block - 1) / slots_per_block;
  if (blocks > 0x7fffffff) {
    return invalid_argument(fmt::format("{}: {} rows exceed one launch's grid", kernel, row_slots));
  }
  return dim3(static_cast<unsigned>(blocks));
}

}  // namespace engram::kernels::detail
