#include "kernels/table_fill_kernel.h"

#include <fmt/format.h>

#include "core/model/table_fill_row.h"

namespace engram::kernels {
namespace {

constexpr int kMaxRowWords = 128;  // rows up to 1 KiB (V4.1: 33 words)

// One thread per row: the row is built in registers/local memory, then
// stored as 8-byte words (rows are written whole, never byte by byte).
__global__ void fill_rows_kernel(uint8_t* rows, bool fp8, int dim, uint64_t row_bytes, uint64_t layer_seed,
                                 int64_t first_row, int64_t row_count, bool word_aligned) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= row_count) return;
  uint64_t words[kMaxRowWords];
  uint8_t* bytes = reinterpret_cast<uint8_t*>(words);
  const uint64_t word_count = (row_bytes + 7) / 8;
  words[word_count - 1] = 0;
  fill::fill_row(fp8, dim, layer_seed, static_cast<uint64_t>(first_row + i), bytes);
  uint8_t* dst = rows + static_cast<uint64_t>(i) * row_bytes;
  if (word_aligned) {
    for (uint64_t w = 0; w < word_count; ++w) reinterpret_cast<uint64_t*>(dst)[w] = words[w];
  } else {
    for (uint64_t b = 0; b < row_bytes; ++b) dst[b] = bytes[b];
  }
}

}  // namespace

Status fill_table_rows(const TableFillArgs& args, cudaStream_t stream) {
  if (args.table == nullptr) return invalid_argument("fill_table_rows: table is null");
  const TableSpec& t = *args.table;
  const uint64_t row_bytes = t.row_bytes();
  if (row_bytes == 0 || row_bytes > kMaxRowWords * 8ull) {
    return invalid_argument(fmt::format("fill_table_rows: rows of {} B are outside 1..{} B; the device fill builds a "
                                        "row in one thread", row_bytes, kMaxRowWords * 8));
  }
  if (args.first_row < 0 || args.row_count < 0 || args.first_row + args.row_count > t.row_count()) {
    return invalid_argument(fmt::format("fill_table_rows: rows [{}, {}) are not inside the table's {} rows",
                                        args.first_row, args.first_row + args.row_count, t.row_count()));
  }
  if (args.row_count == 0) return Status::ok();
  if (args.rows == nullptr) return invalid_argument("fill_table_rows: rows is null");
  const bool word_aligned = row_bytes % 8 == 0 && reinterpret_cast<uintptr_t>(args.rows) % 8 == 0;
  constexpr int kThreads = 256;
  const int64_t blocks = (args.row_count + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) return invalid_argument(fmt::format("fill_table_rows: {} rows exceed one launch", args.row_count));
  fill_rows_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<uint8_t*>(args.rows), t.row_format == RowFormat::kFp8E4M3Ue8m0, t.dim, row_bytes,
      fill::layer_seed(args.seed, t.layer_id), args.first_row, args.row_count, word_aligned);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    return Status(ErrorCode::kInternal, fmt::format("fill_table_rows launch failed: {}", cudaGetErrorName(error)),
                  ErrorContext{-1, -1, "fill"});
  }
  return Status::ok();
}

}  // namespace engram::kernels
