// The host-table kernels: a host table (whole, or one TP slice of it)
// registered with the GPU and read in place (gather_range), or its rows
// staged in bulk and dequantised (dequant_staged). Both take HostRowsArgs,
// checked by one validator (detail::check_head_window).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "kernels/gather_kernels.h"
#include "kernels/gather_launch.h"
#include "kernels/gather_rows.cuh"
#include "kernels/row_dequant.cuh"
#include "kernels/v41_fast_path.h"
#include "kernels/v41_row.cuh"

namespace engram::kernels {
namespace {

// Warp per slot over the staged raw rows (device memory, row_bytes apart).
template <RowFormat kFormat>
__global__ void __launch_bounds__(kThreadsPerBlock)
    dequant_staged_rows(const int64_t* __restrict__ ids, int64_t slots, int ids_per_token, int head_begin,
                        int head_count, int64_t first_row, int64_t row_count, const uint8_t* __restrict__ staging,
                        uint64_t row_bytes, int dim, device::ScaleDecoder scales, uint16_t* __restrict__ out) {
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (slot >= slots) return;
  const int64_t row = __ldg(ids + WindowIds{ids_per_token, head_begin, head_count}(slot)) - first_row;
  uint16_t* dst = out + slot * dim;
  if (row < 0 || row >= row_count) {
    for (int i = lane; i < dim; i += 32) dst[i] = 0;
    return;
  }
  const uint8_t* src = staging + static_cast<uint64_t>(slot) * row_bytes;
  if constexpr (kFormat == RowFormat::kFp8E4M3Ue8m0) {
    for (int i = lane; i < dim; i += 32) {
      const float scale = device::e8m0_scale(src[dim + i / kScaleBlock], scales);
      dst[i] = static_cast<uint16_t>(device::dequant_fp8(src[i], scale, scales.minus_zero_bits));
    }
  } else {
    const uint16_t* values = reinterpret_cast<const uint16_t*>(src);
    for (int i = lane; i < dim; i += 32)
      dst[i] = static_cast<uint16_t>(device::canonical_bf16(values[i], scales.minus_zero_bits));
  }
}

// The V4.1 row: lane l dequantises values 8l..8l+7 (one 8-byte load, one
// 16-byte store); staging rows are 8-byte aligned (264 = 33 x 8).
__global__ void __launch_bounds__(kThreadsPerBlock)
    dequant_staged_fp8_256(const int64_t* __restrict__ ids, int64_t slots, int ids_per_token, int head_begin,
                           int head_count, int64_t first_row, int64_t row_count, const uint8_t* __restrict__ staging,
                           uint64_t row_bytes, device::ScaleDecoder decoder, uint16_t* __restrict__ out) {
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (slot >= slots) return;
  const int64_t row = __ldg(ids + WindowIds{ids_per_token, head_begin, head_count}(slot)) - first_row;
  uint4* dst = reinterpret_cast<uint4*>(out + slot * detail::kFastDim) + lane;
  if (row < 0 || row >= row_count) {
    store_zero<true>(dst);
    return;
  }
  const uint8_t* src = staging + static_cast<uint64_t>(slot) * row_bytes;
  const uint2 data = __ldg(reinterpret_cast<const uint2*>(src) + lane);
  const uint2 scales = __ldg(reinterpret_cast<const uint2*>(src + detail::kFastDim));
  store_values<true>(dst, data, scales, lane, decoder);
}

}  // namespace

Status dequant_staged(const HostRowsArgs& args, const void* staging_rows, cudaStream_t stream) {
  ENGRAM_RETURN_IF_ERROR(detail::check_head_window(args, "dequant_staged"));
  if (args.tokens == 0) return Status::ok();
  if (args.ids == nullptr || args.out == nullptr || staging_rows == nullptr) {
    return invalid_argument("dequant_staged: ids, staging and out must be device pointers, not null");
  }
  const int64_t slots = args.tokens * args.head_count;
  ENGRAM_ASSIGN_OR_RETURN(const dim3 grid, detail::row_grid(slots, 1, "dequant_staged"));
  const auto* staging = static_cast<const uint8_t*>(staging_rows);
  const device::ScaleDecoder decoder = device::layout_decoder(args.layout);
  if (detail::is_fast_row(args.layout) && args.layout.row_bytes % 8 == 0 && detail::aligned(staging_rows, 8) &&
      detail::aligned(args.out, 16)) {
    dequant_staged_fp8_256<<<grid, kThreadsPerBlock, 0, stream>>>(args.ids, slots, args.ids_per_token,
                                                                  args.head_begin, args.head_count, args.first_row,
                                                                  args.row_count, staging, args.layout.row_bytes,
                                                                  decoder, args.out);
  } else if (args.layout.format == RowFormat::kFp8E4M3Ue8m0) {
    dequant_staged_rows<RowFormat::kFp8E4M3Ue8m0><<<grid, kThreadsPerBlock, 0, stream>>>(
        args.ids, slots, args.ids_per_token, args.head_begin, args.head_count, args.first_row, args.row_count,
        staging, args.layout.row_bytes, args.layout.dim, decoder, args.out);
  } else {
    dequant_staged_rows<RowFormat::kBf16><<<grid, kThreadsPerBlock, 0, stream>>>(
        args.ids, slots, args.ids_per_token, args.head_begin, args.head_count, args.first_row, args.row_count,
        staging, args.layout.row_bytes, args.layout.dim, decoder, args.out);
  }
  return detail::launch_status("dequant_staged");
}

Status gather_range(const HostRowsArgs& args, const void* base, cudaStream_t stream) {
  ENGRAM_RETURN_IF_ERROR(detail::check_head_window(args, "gather_range"));
  if (args.first_row < 0 || args.row_count < 0) {
    return invalid_argument(fmt::format("gather_range: rows [{}, +{}) are not a row range", args.first_row,
                                        args.row_count));
  }
  if (args.tokens == 0) return Status::ok();
  if (args.ids == nullptr || args.out == nullptr || (base == nullptr && args.row_count > 0)) {
    return invalid_argument("gather_range: ids, out and base must be device pointers, not null");
  }
  const bool vector = detail::can_vectorise(args.layout, args.out) && detail::aligned(base, 8);
  if (vector && detail::is_fast_row(args.layout)) return detail::launch_v41_range(args, base, stream);
  RangeSource source;
  source.begin = args.first_row;
  source.end = args.first_row + args.row_count;
  source.base = static_cast<const uint8_t*>(base);
  source.row_bytes = args.layout.row_bytes;
  source.scales = device::layout_decoder(args.layout);
  const WindowIds window{args.ids_per_token, args.head_begin, args.head_count};
  return launch_rows(args.ids, args.tokens * args.head_count, args.layout, source, vector, args.out, stream,
                     "gather_range", window);
}

}  // namespace engram::kernels
