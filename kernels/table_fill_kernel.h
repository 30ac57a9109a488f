// The table fill on the device: rows of a table written by the GPU with
// exactly the bytes core/model/table_fill.h writes on the CPU (both compile
// core/model/table_fill_row.h), at device-memory speed instead of a host
// fill and a copy. Enqueues only (capturable); errors name the field.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/base/status.h"
#include "core/model/table_spec.h"

namespace engram::kernels {

struct TableFillArgs {
  void* rows = nullptr;        // device (or device-mapped host) address of row first_row
  const TableSpec* table = nullptr;
  uint64_t seed = 0;
  int64_t first_row = 0;
  int64_t row_count = 0;
};
Status fill_table_rows(const TableFillArgs& args, cudaStream_t stream);

}  // namespace engram::kernels
