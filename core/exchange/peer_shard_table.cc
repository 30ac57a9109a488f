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
                                             uint64_t row_bytes, const ShardFiller& fill,
                                             PeerShardTableOptions options) {
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

  // Fill this rank's shard through its own mapping, one bounded chunk at a time.
  const int me = group.rank();
  const int64_t begin = layout.shard_begin(me);
  const int64_t end = layout.shard_end(me);
  const int64_t chunk_rows = std::max<int64_t>(1, static_cast<int64_t>(options.fill_chunk_bytes / row_bytes));
  Status filled;
  std::vector<std::byte> staging;
  for (int64_t row = begin; row < end && filled.is_ok(); row += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, end - row);
    staging.assign(static_cast<size_t>(rows) * row_bytes, std::byte{0});
    filled = fill(row, staging);
    if (filled.is_ok())
      filled = backend.device->copy_to_device(mapping.local() + static_cast<uint64_t>(row - begin) * row_bytes,
                                              staging);
  }
  if (!filled.is_ok()) filled = std::move(filled).with_context(me_world, -1, "fill");

  // Agree that every shard is filled (the all-gather also orders the writes
  // before any peer's first read).
  GroupVerdict verdict = agree_on_outcome(group, filled, "peer shard table fill");
  if (!verdict.status.is_ok()) {
    coverage_probe("peer shard table: teardown after a failed fill");
    // Every rank got here: the collective teardown is safe. Otherwise
    // ~SharedMapping undoes this rank's part locally.
    if (verdict.round_ok()) mapping.teardown().ignore();
    return std::move(verdict.status);
  }
  return PeerShardTable(backend, std::move(mapping), std::move(layout), row_bytes);
}

Status PeerShardTable::read_row(int64_t row, std::span<std::byte> out) const {
  if (out.size() != row_bytes_)
    return invalid_argument(fmt::format("read_row: output holds {} bytes, a row is {}", out.size(), row_bytes_));
  const int owner = layout_.owner_of(row);  // -1 for DEAD and out-of-table ids
  if (owner < 0) {
    std::memset(out.data(), 0, out.size());
    return Status::ok();
  }
  const DevicePtr address =
      shard_pointers_[static_cast<size_t>(owner)] + static_cast<uint64_t>(row - layout_.shard_begin(owner)) * row_bytes_;
  return backend_->device->copy_from_device(out, address);
}

}  // namespace engram
