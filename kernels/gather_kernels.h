// Host-callable launches of the lookup gather kernels. Everything is a device
// pointer; each call only enqueues work on `stream` (no allocation, no host
// sync), so it can be captured into a CUDA graph. Errors: kInvalidArgument
// naming the bad field, kInternal with the CUDA error of a failed launch.
// Plain C++ header: callers
// need not be compiled by nvcc.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/base/status.h"
#include "core/model/table_spec.h"

namespace engram::kernels {

// How rows are stored and dequantised (TableSpec's row_format, dim, row_bytes).
struct RowLayout {
  RowFormat format = RowFormat::kFp8E4M3Ue8m0;
  int dim = 0;             // bf16 values written per row
  uint64_t row_bytes = 0;  // stride of rows in a shard
  ScaleByteRule scale_byte_rule = ScaleByteRule::kVllm;  // scale bytes 0 and 255 (kernels/row_dequant.cuh ScaleDecoder)
  MinusZeroRule minus_zero = MinusZeroRule::kWritePlusZero;  // -0 written +0, or kept
};
RowLayout row_layout(const TableSpec& table);

// device_peer: every token's rows read straight from the owning shard.
struct GatherPeerArgs {
  const int64_t* ids = nullptr;           // [tokens x heads] row ids; kDeadId or out of range -> zero row
  int64_t tokens = 0;
  int heads = 0;
  const int64_t* shard_starts = nullptr;  // shard_count + 1 entries; the last is row_count
  // shard_count mapped shard addresses (own and peers'), each 16-byte aligned
  // and readable to its 16-byte-rounded end (VMM mappings are): the V4.1
  // fast path reads a row as aligned 16-byte chunks.
  const void* const* shard_bases = nullptr;
  int shard_count = 0;
  RowLayout layout;
  uint16_t* out = nullptr;                // [tokens x heads x dim] bf16
};
Status gather_peer(const GatherPeerArgs& args, cudaStream_t stream);

// device_collective: rows this rank owns, for every gathered id. `out` must
// be zero-filled (zero_fill below); rows owned elsewhere are left untouched,
// so the reduce-scatter sum leaves the owner's value.
struct GatherOwnedArgs {
  const int64_t* ids = nullptr;           // [tokens x heads], tokens = group * tokens_per_rank
  int64_t tokens = 0;
  int heads = 0;
  int64_t shard_begin = 0;                // rows [shard_begin, shard_end) live at shard_base
  int64_t shard_end = 0;
  const void* shard_base = nullptr;
  RowLayout layout;
  uint16_t* out = nullptr;                // [tokens x heads x dim] bf16
  // Whether ids outside the shard (DEAD included) get a zero row. Without it
  // they are left as they are, for a caller that zero-filled `out` first
  // (the one-process NCCL reference); with it that fill, a step of its own,
  // is not needed (the runtime's collective path).
  bool zero_missing = false;
};
Status gather_owned(const GatherOwnedArgs& args, cudaStream_t stream);

// The host-table kernels (a host table, whole or one TP slice of it,
// registered with the GPU or staged in bulk): one row range, rows
// [first_row, first_row + row_count), passed by value; ids outside it (DEAD,
// out of the table, another slice's) write a zero row. Slots are a head
// window of each token: slot s is token s / head_count, head head_begin +
// s % head_count of ids_per_token ids, and writes out[s * dim ...]. Each
// kernel takes where the rows are beside these arguments.
struct HostRowsArgs {
  const int64_t* ids = nullptr;  // [tokens x ids_per_token]
  int64_t tokens = 0;
  int ids_per_token = 0;
  int head_begin = 0;
  int head_count = 0;
  int64_t first_row = 0;
  int64_t row_count = 0;
  RowLayout layout;
  uint16_t* out = nullptr;       // [tokens x head_count x dim] bf16
};

// The rows read in place: row first_row at `base`, row_bytes apart.
Status gather_range(const HostRowsArgs& args, const void* base, cudaStream_t stream);

// Host tables read in bulk (backends/cuda/host_row_stager.h): the rows of
// slots [0, tokens x head_count) were copied, raw, to `staging` (slot s at
// staging + s * row_bytes). Dequantises them into out; a slot whose id is
// outside the row range writes a zero row and reads no staging.
Status dequant_staged(const HostRowsArgs& args, const void* staging, cudaStream_t stream);

// cudaMemsetAsync(0) of `count` bf16 values; capturable.
Status zero_fill(uint16_t* out, uint64_t count, cudaStream_t stream);

}  // namespace engram::kernels
