#include "core/backend/device_compute.h"

namespace engram {

DeviceRowLayout device_row_layout(const TableSpec& table) {
  DeviceRowLayout layout;
  layout.format = table.row_format;
  layout.dim = table.dim;
  layout.row_bytes = table.row_bytes();
  return layout;
}

}  // namespace engram
