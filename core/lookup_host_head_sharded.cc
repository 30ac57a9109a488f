#include "core/lookup_host_head_sharded.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/lookup_rows.h"
#include "core/shard_layout.h"

namespace engram {

HeadShardRows head_shard_rows(const TableSpec& table, int group_size, int shard) {
  const HeadRange heads = head_shard(table.head_count(), group_size, shard);
  HeadShardRows rows;
  rows.first_row = table.head_offset(heads.begin);
  rows.row_count = table.head_offset(heads.end) - rows.first_row;
  ENGRAM_CHECK(rows.first_row >= 0 && rows.row_count >= 0);
  return rows;
}

Status lookup_host_head_sharded(Collectives& group, const LookupRequest& request,
                                std::span<const std::byte> own_head_shard_bytes) {
  const int world_rank = group.world_rank();
  ENGRAM_RETURN_IF_ERROR(check_request_shape(request, world_rank));
  const TableSpec& table = *request.table;
  const int group_size = group.size();
  const HeadRange my_heads = head_shard(table.head_count(), group_size, group.rank());
  const HeadShardRows my_rows = head_shard_rows(table, group_size, group.rank());
  const uint64_t expected = static_cast<uint64_t>(my_rows.row_count) * table.row_bytes();
  if (own_head_shard_bytes.size() != expected)
    return invalid_argument(fmt::format("host_head_sharded: rank {} of {} holds heads [{}, {}) of layer {}: {} rows "
                                        "of {} B = {} bytes, but its shard holds {} bytes",
                                        group.rank(), group_size, my_heads.begin, my_heads.end, table.layer_id,
                                        my_rows.row_count, table.row_bytes(), expected, own_head_shard_bytes.size()))
        .with_context(world_rank, -1, "lookup");

  const Status slot = check_slot(request.token_count(), request.tokens_per_rank_max, world_rank);
  const std::vector<int64_t> mine = pad_ids_to_slot(request, slot.is_ok());
  const size_t members = static_cast<size_t>(group_size);
  std::vector<int64_t> all_ids(mine.size() * members);
  ENGRAM_RETURN_IF_ERROR(group.all_gather(std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(all_ids))));

  // This rank's heads for every token of every member: [member][slot token][my heads][dim].
  const size_t slot_tokens = static_cast<size_t>(request.tokens_per_rank_max);
  const size_t dim = static_cast<size_t>(table.dim);
  const size_t my_width = static_cast<size_t>(my_heads.size());
  std::vector<uint16_t> my_rows_out(members * slot_tokens * my_width * dim);
  lookup_rows_head_range(table, my_heads, own_head_shard_bytes, all_ids, my_rows_out);

  // all_to_all needs equal chunks: pad every member's part to the widest head
  // shard (the first; the last may be short or empty).
  const size_t widest = static_cast<size_t>(head_shard(table.head_count(), group_size, 0).size());
  const size_t chunk_values = slot_tokens * widest * dim;
  std::vector<uint16_t> send(members * chunk_values, 0);
  for (size_t member = 0; member < members; ++member)
    for (size_t t = 0; t < slot_tokens; ++t)
      std::copy_n(my_rows_out.begin() + static_cast<std::ptrdiff_t>((member * slot_tokens + t) * my_width * dim),
                  my_width * dim,
                  send.begin() + static_cast<std::ptrdiff_t>(member * chunk_values + t * widest * dim));
  std::vector<uint16_t> received(members * chunk_values);
  ENGRAM_RETURN_IF_ERROR(group.all_to_all(std::as_bytes(std::span(send)), std::as_writable_bytes(std::span(received))));
  ENGRAM_RETURN_IF_ERROR(slot);

  // Chunk from member m holds m's heads for this rank's tokens.
  const size_t heads = static_cast<size_t>(table.head_count());
  const size_t tokens = static_cast<size_t>(request.token_count());
  for (size_t member = 0; member < members; ++member) {
    const HeadRange theirs = head_shard(table.head_count(), group_size, static_cast<int>(member));
    const size_t width = static_cast<size_t>(theirs.size());
    for (size_t t = 0; t < tokens; ++t)
      std::copy_n(received.begin() + static_cast<std::ptrdiff_t>(member * chunk_values + t * widest * dim),
                  width * dim,
                  request.output.begin() + static_cast<std::ptrdiff_t>((t * heads + static_cast<size_t>(theirs.begin)) * dim));
  }
  return Status::ok();
}

}  // namespace engram
