// What host_private and host_head_sharded share: each rank holds, per
// table, one contiguous range of rows in its own host memory (the whole
// table, or its heads' buckets), filled with the table's bytes, and looks up
// over it with its placement's lookup.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/backend/collectives.h"
#include "core/lookup/lookup_types.h"
#include "core/lookup/tp_heads.h"
#include "core/placements/placement.h"

namespace engram {

// The rows this rank holds of `table` (`group`: the placement's group;
// `tp_group`: its replica's TP ranks).
using RowsHeld = RowRange (*)(const TableSpec& table, const Collectives& group, const Collectives& tp_group);
// The placement's lookup over the rows held.
using LookupHeld = Status (*)(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                              std::span<const std::byte> rows);

// Threads for filling `bytes` of host table: one below 256 MiB, else the
// host's cores (at most 32).
int fill_threads_for(uint64_t bytes);

// How the device reads the rows held (core/placements/host_rows_on_device.h).
enum class DeviceRowsLookup : uint8_t {
  kTpSlice,        // host_private: the rank's TP slice; over the TP group when tp > 1
  kHeadShards,     // host_head_sharded: the collective over the group's head shards (tp 1)
  kNone,           // SGLang's layouts here: the host lookup only, nothing registered with the device
};

// Fills every table's rows (from several threads when large); where the
// rank has a DeviceCompute, registers them for its device lookups
// (collective over the group that reads them together).
Result<std::unique_ptr<PlacementTables>> build_private_host_rows(PlacementContext& context, RowsHeld rows_held,
                                                                 LookupHeld lookup_held,
                                                                 DeviceRowsLookup device_lookup);

}  // namespace engram
