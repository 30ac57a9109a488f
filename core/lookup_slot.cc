#include <fmt/format.h>

#include <algorithm>

#include "core/lookup_types.h"

namespace engram {

Status check_request_shape(const LookupRequest& request, int world_rank) {
  auto fail = [&](std::string message) {
    return invalid_argument(std::move(message)).with_context(world_rank, -1, "lookup");
  };
  if (request.table == nullptr) return fail("lookup: request has no table");
  const TableSpec& table = *request.table;
  if (table.head_count() < 1 || table.dim < 1)
    return fail(fmt::format("lookup: layer {} table has {} heads and dim {}; both must be positive", table.layer_id,
                            table.head_count(), table.dim));
  if (request.row_ids.size() % static_cast<size_t>(table.head_count()) != 0)
    return fail(fmt::format("lookup: {} row ids is not a whole number of tokens of {} heads (layer {})",
                            request.row_ids.size(), table.head_count(), table.layer_id));
  if (request.tokens_per_rank_max < 1)
    return fail(fmt::format("lookup: tokens_per_rank_max is {}; the DP slot must hold at least one token",
                            request.tokens_per_rank_max));
  const uint64_t expected = static_cast<uint64_t>(request.token_count()) *
                            static_cast<uint64_t>(request.values_per_token());
  if (request.output.size() != expected)
    return fail(fmt::format("lookup: output holds {} bf16 values; {} tokens x {} heads x {} dim need {}",
                            request.output.size(), request.token_count(), table.head_count(), table.dim,
                            expected));
  return Status::ok();
}

Status check_slot(int64_t token_count, int64_t tokens_per_rank_max, int world_rank) {
  ENGRAM_CHECK(token_count >= 0);
  if (token_count <= tokens_per_rank_max) return Status::ok();
  return invalid_argument(
             fmt::format("lookup: rank {} has {} tokens but the DP slot holds {} (tokens_per_rank_max); raise "
                         "tokens_per_rank_max to at least {} — tokens are never truncated",
                         world_rank, token_count, tokens_per_rank_max, token_count))
      .with_context(world_rank, -1, "lookup");
}

Status check_request(const LookupRequest& request, int world_rank) {
  ENGRAM_RETURN_IF_ERROR(check_request_shape(request, world_rank));
  return check_slot(request.token_count(), request.tokens_per_rank_max, world_rank);
}

std::vector<int64_t> pad_ids_to_slot(const LookupRequest& request, bool contribute) {
  ENGRAM_CHECK(request.table != nullptr && request.tokens_per_rank_max >= 0);
  const size_t slot_ids = static_cast<size_t>(request.tokens_per_rank_max) * static_cast<size_t>(request.heads());
  std::vector<int64_t> padded(slot_ids, kDeadId);
  if (contribute) {
    ENGRAM_CHECK(request.row_ids.size() <= slot_ids);
    std::copy(request.row_ids.begin(), request.row_ids.end(), padded.begin());
  }
  return padded;
}

}  // namespace engram
