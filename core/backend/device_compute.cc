#include "core/backend/device_compute.h"

#include <fmt/format.h>

namespace engram {

DeviceRowLayout device_row_layout(const TableSpec& table) {
  DeviceRowLayout layout;
  layout.format = table.row_format;
  layout.dim = table.dim;
  layout.row_bytes = table.row_bytes();
  layout.scale_byte_rule = table.scale_byte_rule;
  return layout;
}

Status check_strided_copy(uint64_t dst_bytes, uint64_t row_bytes, uint64_t src_pitch_bytes, int rank) {
  auto bad = [rank](std::string message) {
    return Status(ErrorCode::kInvalidArgument, "strided copy to host: " + std::move(message),
                  {rank, -1, "copy to host"});
  };
  if (row_bytes == 0) return bad("row_bytes is 0; copy at least one byte a row");
  if (dst_bytes % row_bytes != 0)
    return bad(fmt::format("the destination's {} bytes are not whole rows of row_bytes {}; size it rows x row_bytes",
                           dst_bytes, row_bytes));
  if (row_bytes > src_pitch_bytes)
    return bad(fmt::format("row_bytes {} is wider than src_pitch_bytes {}; rows may not overlap", row_bytes,
                           src_pitch_bytes));
  return Status::ok();
}

}  // namespace engram
