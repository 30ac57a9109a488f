#include "core/exchange/peer_shard_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/base/coverage_probe.h"
#include "core/exchange/group_agreement.h"

namespace engram {

PeerShardTable::PeerShardTable(RankBackend& backend, SharedMapping mapping, RowShardLayout layout, uint64_t row_bytes)
    : backend_(&backend),
      mapping_(std::move(mapping)),
      layout_(std::move(layout)),
      row_bytes_(row_bytes),
      shard_pointers_(mapping_.peer_pointers()) {
  ENGRAM_CHECK(layout_.shard_count() == mapping_.group_size());
}

Result<PeerShardTable> PeerShardTable::build(RankBackend& backend, Collectives& group, int64_t row_count,
                                             uint64_t row_bytes, const ShardFiller& fill) {
  const int me_world = group.world_rank();
  if (row_count < 0 || row_bytes == 0)
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("peer shard table: row_count {} and row_bytes {} must be >= 0 and > 0", row_count,
                              row_bytes),
                  {me_world, -1, "layout"});
  RowShardLayout layout(row_count, group.size());
  // Equal allocations on every rank (the exchange checks it): the largest
  // shard; at least one row so an empty table still shares one granule.
  const uint64_t shard_bytes = static_cast<uint64_t>(std::max<int64_t>(layout.max_shard_rows(), 1)) * row_bytes;
  ENGRAM_ASSIGN_OR_RETURN(SharedMapping mapping, exchange_shareable_handles(backend, group, shard_bytes));

  // Fill this rank's shard through its own mapping.
  const int me = group.rank();
  const int64_t begin = layout.shard_begin(me);
  Status filled = fill(mapping.local(), begin, layout.shard_rows(me));
  if (!filled.is_ok()) filled = std::move(filled).with_context(me_world, -1, "fill");

  // Agree that every shard is filled (the all-gather also orders the writes
  // before any peer's first read).
  GroupVerdict verdict = agree_on_outcome(group, filled, "peer shard table fill");
  if (!verdict.status.is_ok()) {
    coverage_probe<"peer shard table: teardown after a failed fill">();
    // Every rank got here: the collective teardown is safe. Otherwise
    // ~SharedMapping undoes this rank's part locally.
    if (verdict.round_ok()) mapping.teardown().ignore();
    return std::move(verdict.status);
  }
  return PeerShardTable(backend, std::move(mapping), std::move(layout), row_bytes);
}

ShardFiller host_staged_filler(DeviceMemory& device, uint64_t row_bytes, HostRowsFill fill, uint64_t chunk_bytes) {
  ENGRAM_CHECK(row_bytes > 0);
  return [&device, row_bytes, fill = std::move(fill), chunk_bytes](DevicePtr at, int64_t first_row,
                                                                   int64_t rows) -> Status {
    const int64_t chunk_rows = std::max<int64_t>(1, static_cast<int64_t>(chunk_bytes / row_bytes));
    std::vector<std::byte> staging;
    for (int64_t done = 0; done < rows; done += chunk_rows) {
      const int64_t n = std::min(chunk_rows, rows - done);
      staging.assign(static_cast<size_t>(n) * row_bytes, std::byte{0});
      ENGRAM_RETURN_IF_ERROR(fill(first_row + done, staging));
      ENGRAM_RETURN_IF_ERROR(device.copy_to_device(at + static_cast<uint64_t>(done) * row_bytes, staging));
    }
    return Status::ok();
  };
}

}  // namespace engram
