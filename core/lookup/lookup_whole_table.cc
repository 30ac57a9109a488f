#include "core/lookup/lookup_whole_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/lookup/lookup_rows.h"

namespace engram {

Status lookup_whole_table(Collectives& group, const LookupRequest& request, std::span<const std::byte> table_bytes,
                          std::string_view what) {
  const int world_rank = group.world_rank();
  ENGRAM_RETURN_IF_ERROR(check_request(request, world_rank));
  const TableSpec& table = *request.table;
  if (table_bytes.size() != table.table_bytes())
    return invalid_argument(fmt::format("{} of layer {} holds {} bytes; {} rows of {} B need {}", what,
                                        table.layer_id, table_bytes.size(), table.row_count(), table.row_bytes(),
                                        table.table_bytes()))
        .with_context(world_rank, -1, "lookup");
  lookup_rows_whole_table(table, table_bytes, request.row_ids, request.output);
  return Status::ok();
}

Status lookup_whole_table_on_tp_rank(Collectives& tp_group, const LookupRequest& request,
                                     std::span<const std::byte> table_bytes, std::string_view what) {
  if (request.sequence_parallel_shards == 1) return lookup_whole_table(tp_group, request, table_bytes, what);
  const int world_rank = tp_group.world_rank();
  ENGRAM_RETURN_IF_ERROR(check_request(request, world_rank));
  if (request.sequence_parallel_shards != tp_group.size())
    return invalid_argument(fmt::format("lookup: sequence parallelism over {} TP ranks, but this replica has {}",
                                        request.sequence_parallel_shards, tp_group.size()))
        .with_context(world_rank, -1, "lookup");
  const size_t per_token = static_cast<size_t>(request.values_per_token());
  std::vector<uint16_t> every_token(static_cast<size_t>(request.token_count()) * per_token);
  LookupRequest all = request;
  all.sequence_parallel_shards = 1;
  all.output = every_token;
  ENGRAM_RETURN_IF_ERROR(lookup_whole_table(tp_group, all, table_bytes, what));
  const size_t shard_tokens = static_cast<size_t>(request.output_token_count());
  const size_t first = shard_tokens * static_cast<size_t>(tp_group.rank());
  const size_t last = std::min(first + shard_tokens, static_cast<size_t>(request.token_count()));
  std::fill(request.output.begin(), request.output.end(), uint16_t{0});
  if (first < last)
    std::copy(every_token.begin() + static_cast<std::ptrdiff_t>(first * per_token),
              every_token.begin() + static_cast<std::ptrdiff_t>(last * per_token), request.output.begin());
  return Status::ok();
}

}  // namespace engram
