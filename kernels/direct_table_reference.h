// The whole table of a small model, filled as every placement fills it, and a
// direct dequantised lookup against it (the GPU kernel's CPU reference over a
// single shard: independent of the placements' row loops). The scenario
// runners on the emulator and on real processes check their lookups with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/model/hashing.h"
#include "core/model/table_spec.h"

namespace engram::kernels {

struct DirectTables {
  ModelSpec model;
  uint64_t fill_seed = 1;
  std::vector<std::vector<std::byte>> whole;  // by table index
  std::vector<TableHasher> hashers;           // by table index

  // ids: [tokens][heads] of table `table`; out: ids.size() * dim bf16,
  // decoded by `decoded_as`'s scale-byte and -0 rules (the looking-up rank's:
  // EngramRuntime::table_model()); its structure must be the table's.
  void lookup(int table, const TableSpec& decoded_as, std::span<const int64_t> ids, std::span<uint16_t> out) const;
};

// Filled once per (key, fill seed) and kept for the process: a sweep runs
// thousands of jobs on the same small tables. `key` names the model and its
// token-space settings (preset name + HashOverrides::to_text()). Thread-safe.
const DirectTables& direct_tables(const std::string& key, const ModelSpec& model, uint64_t fill_seed);

}  // namespace engram::kernels
