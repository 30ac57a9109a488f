// Uses the installed engramlab as an engine would: the core (the V4.1 model
// preset and its table sizes) and a real host backend (memfd device memory).
// Prints one line and exits 0 when the published table sizes come out;
// anything else is printed and exits 1.
#include <cstdint>
#include <iostream>

#include "backends/memfd/memfd_device_memory.h"
#include "core/base/status.h"
#include "core/model/table_spec.h"

int main() {
  const engram::Result<engram::ModelSpec> model = engram::model_preset("deepseek-v4.1-flash");
  if (!model.is_ok()) {
    std::cerr << "install_consumer: model_preset: " << model.status().to_string() << "\n";
    return 1;
  }
  // The published sizes of the two V4.1-Flash tables (layers 1 and 14).
  const uint64_t expected_bytes[] = {101'377'628'352, 101'380'404'048};
  if (model->tables.size() != 2) {
    std::cerr << "install_consumer: " << model->tables.size() << " tables, expected 2\n";
    return 1;
  }
  for (size_t i = 0; i < model->tables.size(); ++i) {
    const engram::TableSpec& table = model->tables[i];
    if (table.table_bytes() != expected_bytes[i]) {
      std::cerr << "install_consumer: layer " << table.layer_id << " table " << table.table_bytes()
                << " bytes, expected " << expected_bytes[i] << "\n";
      return 1;
    }
  }

  engram::memfd::MemfdDeviceMemory memory;
  const engram::Result<engram::DeviceInfo> info = memory.info();
  if (!info.is_ok()) {
    std::cerr << "install_consumer: memfd info: " << info.status().to_string() << "\n";
    return 1;
  }
  if (info->granularity_bytes != engram::memfd::MemfdDeviceMemory::kDefaultGranularityBytes) {
    std::cerr << "install_consumer: memfd granularity " << info->granularity_bytes << "\n";
    return 1;
  }

  std::cout << "install_consumer: " << model->name << " tables " << model->tables[0].table_bytes() << " + "
            << model->tables[1].table_bytes() << " bytes; memfd device '" << info->name << "', granularity "
            << info->granularity_bytes << " bytes\n";
  return 0;
}
