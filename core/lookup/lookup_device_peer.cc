#include "core/lookup/lookup_device_peer.h"

#include <fmt/format.h>

#include "core/lookup/lookup_rows.h"

namespace engram {

Status lookup_device_peer(Collectives& group, const LookupRequest& request, const RowShardLayout& layout,
                          std::span<const std::span<const std::byte>> shards_by_owner) {
  const int world_rank = group.world_rank();
  ENGRAM_RETURN_IF_ERROR(check_request(request, world_rank));
  const TableSpec& table = *request.table;
  if (layout.row_count() != table.row_count() || static_cast<int>(shards_by_owner.size()) != layout.shard_count())
    return invalid_argument(fmt::format("device_peer: {} shard mappings for a layout of {} rows in {} shards; "
                                        "layer {} has {} rows",
                                        shards_by_owner.size(), layout.row_count(), layout.shard_count(),
                                        table.layer_id, table.row_count()))
        .with_context(world_rank, -1, "lookup");
  for (int s = 0; s < layout.shard_count(); ++s) {
    const uint64_t expected = static_cast<uint64_t>(layout.shard_rows(s)) * table.row_bytes();
    if (shards_by_owner[static_cast<size_t>(s)].size() != expected)
      return invalid_argument(fmt::format("device_peer: the mapping of shard {} holds {} bytes; {} rows of {} B "
                                          "need {}",
                                          s, shards_by_owner[static_cast<size_t>(s)].size(), layout.shard_rows(s),
                                          table.row_bytes(), expected))
          .with_context(world_rank, s, "lookup");
  }
  lookup_rows_from_shards(table, layout, shards_by_owner, request.row_ids, request.output);
  return Status::ok();
}

Status lookup_device_peer_by_row(Collectives& group, const LookupRequest& request, const PeerRowRead& read_row) {
  const int world_rank = group.world_rank();
  ENGRAM_RETURN_IF_ERROR(check_request(request, world_rank));
  Status failed;
  const bool ok = lookup_rows_by_reader(
      *request.table,
      [&](int64_t row, std::span<std::byte> bytes) {
        failed = read_row(row, bytes);
        return failed.is_ok();
      },
      request.row_ids, request.output);
  if (!ok) return std::move(failed).with_context(world_rank, -1, "lookup");
  return Status::ok();
}

}  // namespace engram
