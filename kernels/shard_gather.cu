// The shard gather: the device placements' lookups over GPU shards.
// gather_peer reads every token's rows straight from the owning shard (own
// and peers' mappings); gather_owned reads the rows this rank owns for the
// collective path. V4.1 rows take the fast path (kernels/v41_fast_path.h),
// every other layout the warp-per-row kernel (kernels/gather_rows.cuh).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "kernels/gather_kernels.h"
#include "kernels/gather_launch.h"
#include "kernels/gather_peer_variants.h"
#include "kernels/gather_rows.cuh"
#include "kernels/v41_fast_path.h"

namespace engram::kernels {

using detail::aligned;
using detail::can_vectorise;
using detail::check_layout;
using detail::is_fast_row;

RowLayout row_layout(const TableSpec& table) {
  RowLayout layout;
  layout.format = table.row_format;
  layout.dim = table.dim;
  layout.row_bytes = table.row_bytes();
  layout.scale_byte_rule = table.scale_byte_rule;
  layout.minus_zero = table.minus_zero;
  return layout;
}

Status gather_peer(const GatherPeerArgs& args, cudaStream_t stream) {
  ENGRAM_RETURN_IF_ERROR(detail::check_peer_args(args));
  if (args.tokens == 0) return Status::ok();
  // Shard bases live on the device, so their alignment is the caller's
  // contract: VMM mappings are granularity-aligned.
  const bool vector = can_vectorise(args.layout, args.out);
  if (vector && is_fast_row(args.layout)) {
    return detail::launch_v41_peer(args, peer_variant_for(args.tokens * args.heads), stream);
  }
  PeerSource source{args.shard_starts, args.shard_bases, args.shard_count, args.layout.row_bytes,
                    device::layout_decoder(args.layout)};
  return launch_rows(args.ids, args.tokens * args.heads, args.layout, source, vector, args.out, stream, "gather_peer");
}

Status gather_owned(const GatherOwnedArgs& args, cudaStream_t stream) {
  ENGRAM_RETURN_IF_ERROR(check_layout(args.layout, "gather_owned"));
  if (args.tokens < 0 || args.heads <= 0) {
    return invalid_argument(fmt::format("gather_owned: tokens {} must be >= 0 and heads {} > 0", args.tokens, args.heads));
  }
  if (args.shard_begin < 0 || args.shard_end < args.shard_begin) {
    return invalid_argument(fmt::format("gather_owned: shard [{}, {}) is not a row range", args.shard_begin,
                                        args.shard_end));
  }
  if (args.tokens == 0) return Status::ok();
  if (args.ids == nullptr || args.out == nullptr || (args.shard_base == nullptr && args.shard_end > args.shard_begin)) {
    return invalid_argument("gather_owned: ids, out and shard_base must be device pointers, not null");
  }
  const bool vector = can_vectorise(args.layout, args.out) && aligned(args.shard_base, 8);
  if (vector && is_fast_row(args.layout)) return detail::launch_v41_owned(args, stream);
  OwnedSource source{args.shard_begin, args.shard_end, static_cast<const uint8_t*>(args.shard_base),
                     args.layout.row_bytes, device::layout_decoder(args.layout)};
  if (args.zero_missing) {
    return launch_rows(args.ids, args.tokens * args.heads, args.layout, RangeSource{source}, vector, args.out, stream,
                       "gather_owned");
  }
  return launch_rows(args.ids, args.tokens * args.heads, args.layout, source, vector, args.out, stream, "gather_owned");
}

Status zero_fill(uint16_t* out, uint64_t count, cudaStream_t stream) {
  if (count == 0) return Status::ok();
  if (out == nullptr) return invalid_argument("zero_fill: out is null");
  cudaError_t error = cudaMemsetAsync(out, 0, count * sizeof(uint16_t), stream);
  if (error != cudaSuccess) {
    return Status(ErrorCode::kInternal,
                  fmt::format("zero_fill: cudaMemsetAsync of {} bf16 failed: {}", count, cudaGetErrorName(error)),
                  ErrorContext{-1, -1, "zero fill"});
  }
  return Status::ok();
}

}  // namespace engram::kernels
