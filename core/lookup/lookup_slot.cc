#include <fmt/format.h>

#include <algorithm>

#include "core/lookup/lookup_types.h"

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
  if (request.sequence_parallel_shards < 1)
    return fail(fmt::format("lookup: sequence_parallel_shards is {}; use 1 (off) or the TP size",
                            request.sequence_parallel_shards));
  const uint64_t expected = static_cast<uint64_t>(request.output_token_count()) *
                            static_cast<uint64_t>(request.values_per_token());
  if (request.output.size() != expected)
    return fail(fmt::format("lookup: output holds {} bf16 values; {} tokens{} x {} heads x {} dim need {}",
                            request.output.size(), request.output_token_count(),
                            request.sequence_parallel_shards > 1
                                ? fmt::format(" (this TP rank's shard of {} over {})", request.token_count(),
                                              request.sequence_parallel_shards)
                                : std::string(),
                            table.head_count(), table.dim, expected));
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

std::vector<int64_t> header_and_slot(const LookupRequest& request, bool contribute, int world_rank) {
  const std::vector<int64_t> slot = pad_ids_to_slot(request, contribute);
  std::vector<int64_t> words;
  words.reserve(kGroupHeaderWords + slot.size());
  words.push_back(request.table_unknown ? kUnknownTableTag : request.table->layer_id);
  words.push_back(world_rank);
  words.insert(words.end(), slot.begin(), slot.end());
  return words;
}

Status check_group_headers(std::span<const int64_t> gathered, size_t stride, const LookupRequest& request,
                           int world_rank) {
  ENGRAM_CHECK(stride >= kGroupHeaderWords && gathered.size() % stride == 0);
  const int64_t mine = request.table_unknown ? kUnknownTableTag : request.table->layer_id;
  auto describe = [](int64_t tag) {
    return tag == kUnknownTableTag ? std::string("a table index it does not have")
                                   : fmt::format("the table of layer {}", tag);
  };
  for (size_t at = 0; at < gathered.size(); at += stride) {
    const int64_t theirs = gathered[at];
    const int peer = static_cast<int>(gathered[at + 1]);
    if (theirs == mine && theirs != kUnknownTableTag) continue;
    if (peer == world_rank && theirs == mine) continue;  // this rank's own unknown table: its caller reports it
    const std::string culprit = theirs == kUnknownTableTag ? fmt::format("the table index rank {} passed", peer)
                                : mine == kUnknownTableTag   ? fmt::format("the table index rank {} passed", world_rank)
                                                             : std::string("the table indexes both ranks passed");
    return failed_precondition(
               fmt::format("lookup: rank {} asked for {} while rank {} asked for {}; every rank of a group must look "
                           "up the same table in the same step, so this step's rows are void on every rank; check {}",
                           peer, describe(theirs), world_rank, describe(mine), culprit))
        .with_context(world_rank, peer, "lookup");
  }
  return Status::ok();
}

std::vector<int64_t> ids_without_headers(std::span<const int64_t> gathered, size_t stride) {
  ENGRAM_CHECK(stride >= kGroupHeaderWords && gathered.size() % stride == 0);
  std::vector<int64_t> ids;
  ids.reserve(gathered.size() / stride * (stride - kGroupHeaderWords));
  for (size_t at = 0; at < gathered.size(); at += stride)
    ids.insert(ids.end(), gathered.begin() + static_cast<std::ptrdiff_t>(at + kGroupHeaderWords),
               gathered.begin() + static_cast<std::ptrdiff_t>(at + stride));
  return ids;
}

}  // namespace engram
