#include "core/lookup/lookup_device_collective.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/lookup/lookup_rows.h"

namespace engram {

Status lookup_device_collective(Collectives& group, const LookupRequest& request, const RowShardLayout& layout,
                                std::span<const std::byte> own_shard_bytes) {
  const int world_rank = group.world_rank();
  // A malformed request still takes its part in the group's collectives (all
  // DEAD ids, nothing written) so its peers finish instead of waiting on it;
  // only a request without a table or a slot cannot, since the buffer sizes
  // come from them.
  const Status shape = check_request_shape(request, world_rank);
  if (!shape.is_ok() && (request.table == nullptr || request.tokens_per_rank_max <= 0)) return shape;
  const TableSpec& table = *request.table;
  if (layout.shard_count() != group.size() || layout.row_count() != table.row_count())
    return invalid_argument(fmt::format("device_collective: layout of {} rows in {} shards does not fit layer {} "
                                        "({} rows) over a group of {}",
                                        layout.row_count(), layout.shard_count(), table.layer_id, table.row_count(),
                                        group.size()))
        .with_context(world_rank, -1, "lookup");
  const uint64_t shard_bytes_expected = static_cast<uint64_t>(layout.shard_rows(group.rank())) * table.row_bytes();
  if (own_shard_bytes.size() != shard_bytes_expected)
    return invalid_argument(fmt::format("device_collective: shard {} holds {} bytes; {} rows of {} B need {}",
                                        group.rank(), own_shard_bytes.size(), layout.shard_rows(group.rank()),
                                        table.row_bytes(), shard_bytes_expected))
        .with_context(world_rank, -1, "lookup");

  const Status slot =
      shape.is_ok() ? check_slot(request.token_count(), request.tokens_per_rank_max, world_rank) : shape;
  const std::vector<int64_t> mine = header_and_slot(request, slot.is_ok(), world_rank);

  const size_t group_size = static_cast<size_t>(group.size());
  std::vector<int64_t> gathered(mine.size() * group_size);
  ENGRAM_RETURN_IF_ERROR(group.all_gather(std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(gathered))));
  // A group that did not ask for one table still finishes the step's
  // collectives, then fails on every rank.
  const Status agreed = check_group_headers(gathered, mine.size(), request, world_rank);
  const std::vector<int64_t> all_ids = ids_without_headers(gathered, mine.size());

  const size_t slot_values = static_cast<size_t>(request.tokens_per_rank_max) *
                             static_cast<size_t>(request.values_per_token());
  std::vector<uint16_t> owned(slot_values * group_size);
  lookup_rows_owned(table, layout, group.rank(), own_shard_bytes, all_ids, owned);

  if (slot.is_ok() && request.output.size() == slot_values) {
    // A full slot: sum straight into the output (the step's largest buffer saved).
    ENGRAM_RETURN_IF_ERROR(group.reduce_scatter_sum_bf16(owned, request.output));
    return agreed;
  }
  std::vector<uint16_t> summed(slot_values);
  ENGRAM_RETURN_IF_ERROR(group.reduce_scatter_sum_bf16(owned, summed));
  ENGRAM_RETURN_IF_ERROR(slot);
  ENGRAM_RETURN_IF_ERROR(agreed);
  std::copy_n(summed.begin(), request.output.size(), request.output.begin());
  return Status::ok();
}

}  // namespace engram
