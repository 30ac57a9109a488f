// The device_peer table (docs/design.md section 2): each rank of a group holds one
// contiguous row shard in exportable VMM memory, every rank maps every
// peer's shard, and a lookup reads a row straight from its owner's shard
// (owner = binary search over shard starts). Built on the shared handle
// exchange; the gather kernel takes shard_pointers() and shard_starts().
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/exchange/handle_exchange.h"
#include "core/lookup/shard_layout.h"

namespace engram {

// Writes rows [first_row, first_row + rows) of the table at `at`: this
// rank's shard, the device address of row first_row (e.g. the device's own
// table fill, DeviceCompute::fill_table_rows).
using ShardFiller = std::function<Status(DevicePtr at, int64_t first_row, int64_t rows)>;

// Rows made on the host: `fill` writes rows [first_row, ...) into a bounded
// host chunk, each chunk copied to the device (backends without a device
// fill, tests with their own byte patterns).
using HostRowsFill = std::function<Status(int64_t first_row, std::span<std::byte> rows)>;
ShardFiller host_staged_filler(DeviceMemory& device, uint64_t row_bytes, HostRowsFill fill,
                               uint64_t chunk_bytes = 8ull << 20);

class PeerShardTable {
 public:
  // Collective over `group` (which must outlive the table): shard the rows
  // over the group, exchange allocations of max_shard_rows * row_bytes
  // (rounded to the granularity), fill this rank's shard from `fill`, and
  // agree that every rank filled before returning.
  static Result<PeerShardTable> build(RankBackend& backend, Collectives& group, int64_t row_count,
                                      uint64_t row_bytes, const ShardFiller& fill);

  const RowShardLayout& layout() const { return layout_; }
  // group size + 1 entries (the last is row_count): what the kernel copies.
  std::vector<int64_t> shard_starts() const { return layout_.starts(); }
  // Per owner (group rank): this process's address of that owner's shard,
  // whose first row is shard_starts()[owner].
  std::span<const DevicePtr> shard_pointers() const { return shard_pointers_; }
  uint64_t row_bytes() const { return row_bytes_; }
  uint64_t shard_allocation_bytes() const { return mapping_.bytes_per_rank(); }
  HandleType handle_type() const { return mapping_.handle_type(); }

  // Collective: see SharedMapping::teardown.
  Status teardown() { return mapping_.teardown(); }

 private:
  PeerShardTable(RankBackend& backend, SharedMapping mapping, RowShardLayout layout, uint64_t row_bytes);

  RankBackend* backend_;
  SharedMapping mapping_;
  RowShardLayout layout_;
  uint64_t row_bytes_;
  std::vector<DevicePtr> shard_pointers_;
};

}  // namespace engram
