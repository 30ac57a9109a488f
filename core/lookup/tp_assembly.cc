#include "core/lookup/tp_assembly.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/base/splitmix64.h"

namespace engram {
namespace {

// [layer or kUnknownTableTag, world rank, token count or kNotTakingPart, ids digest]
constexpr size_t kHeaderWords = 4;
constexpr int64_t kNotTakingPart = -1;

int64_t ids_digest(std::span<const int64_t> ids) {
  uint64_t state = 0x5eed'0f1d'5ull ^ ids.size();
  uint64_t digest = 0;
  for (int64_t id : ids) {
    state ^= static_cast<uint64_t>(id);
    digest = splitmix64_next(state);
  }
  return static_cast<int64_t>(digest);
}

}  // namespace

Status agree_tp_step(Collectives& tp_group, const LookupRequest& request, const Status& own_error) {
  if (tp_group.size() == 1) return own_error;
  const int world_rank = tp_group.world_rank();
  const bool takes_part = own_error.is_ok() && request.table != nullptr;
  const int64_t mine[kHeaderWords] = {
      request.table == nullptr || request.table_unknown ? kUnknownTableTag : request.table->layer_id, world_rank,
      takes_part ? request.token_count() : kNotTakingPart, takes_part ? ids_digest(request.row_ids) : 0};
  std::vector<int64_t> all(kHeaderWords * static_cast<size_t>(tp_group.size()));
  ENGRAM_RETURN_IF_ERROR(tp_group.all_gather(std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(all))));
  if (!own_error.is_ok()) return own_error;
  for (int m = 0; m < tp_group.size(); ++m) {
    const int64_t* theirs = &all[static_cast<size_t>(m) * kHeaderWords];
    if (theirs[2] != kNotTakingPart) continue;
    const int peer = static_cast<int>(theirs[1]);
    return failed_precondition(
               fmt::format("lookup: TP rank {} (world rank {}) of this replica could not take part in the step (its "
                           "own error says why), so this step's rows are void on every TP rank of the replica",
                           m, peer))
        .with_context(world_rank, peer, "lookup");
  }
  // The same table on every member (the shared header rule), then the same ids.
  ENGRAM_RETURN_IF_ERROR(check_group_headers(all, kHeaderWords, request, world_rank));
  for (int m = 0; m < tp_group.size(); ++m) {
    const int64_t* theirs = &all[static_cast<size_t>(m) * kHeaderWords];
    if (theirs[2] == mine[2] && theirs[3] == mine[3]) continue;
    const int peer = static_cast<int>(theirs[1]);
    return failed_precondition(
               fmt::format("lookup: TP ranks of one replica brought different ids: world rank {} has {} tokens "
                           "(ids digest {:016x}) and world rank {} has {} (digest {:016x}); every TP rank of a "
                           "replica looks up the replica's ids, so this step's rows are void; check the ids each "
                           "TP rank passes",
                           peer, theirs[2], static_cast<uint64_t>(theirs[3]), world_rank, mine[2],
                           static_cast<uint64_t>(mine[3])))
        .with_context(world_rank, peer, "lookup");
  }
  return Status::ok();
}

Status exchange_tp_heads(Collectives& tp_group, const LookupRequest& request, const TpHeadBlocks& blocks,
                         std::span<const uint16_t> local) {
  ENGRAM_CHECK(request.table != nullptr);
  const TableSpec& table = *request.table;
  const int tp = tp_group.size();
  const int me = tp_group.rank();
  ENGRAM_CHECK(blocks.tp_size() == tp && blocks.head_count() == table.head_count());
  ENGRAM_CHECK(request.sequence_parallel_shards == 1 || request.sequence_parallel_shards == tp);
  const size_t tokens = static_cast<size_t>(request.token_count());
  const size_t heads = static_cast<size_t>(table.head_count());
  const size_t dim = static_cast<size_t>(table.dim);
  const size_t width = static_cast<size_t>(blocks.block_width());
  ENGRAM_CHECK(local.size() == tokens * heads * dim);
  const bool sequence_parallel = request.sequence_parallel_shards > 1;
  const size_t out_tokens = static_cast<size_t>(request.output_token_count());
  ENGRAM_CHECK(request.output.size() == out_tokens * heads * dim);
  // Under sequence parallelism this rank's output is tokens [first_token, first_token + out_tokens).
  const size_t first_token = sequence_parallel ? static_cast<size_t>(me) * out_tokens : 0;
  if (tokens == 0) return Status::ok();  // every member has none (the ids agree): nothing to trade

  // Copies token t's heads of block `b` between a [token][heads][dim] buffer
  // and a [token][width][dim] one (the exchange's layout; padded heads zero).
  auto block_of = [&](int b) { return blocks.block(b); };
  const HeadRange mine = block_of(me);
  auto pack = [&](size_t t, std::span<uint16_t> to) {
    std::fill(to.begin(), to.end(), uint16_t{0});
    if (t >= tokens) return;  // past the last token: a zero token of the padded shard
    std::copy_n(local.begin() + static_cast<std::ptrdiff_t>((t * heads + static_cast<size_t>(mine.begin)) * dim),
                static_cast<size_t>(mine.size()) * dim, to.begin());
  };
  auto unpack = [&](int from, std::span<const uint16_t> block_values, size_t out_token) {
    const HeadRange theirs = block_of(from);
    std::copy_n(block_values.begin(), static_cast<size_t>(theirs.size()) * dim,
                request.output.begin() +
                    static_cast<std::ptrdiff_t>((out_token * heads + static_cast<size_t>(theirs.begin)) * dim));
  };
  const size_t token_values = width * dim;

  if (!sequence_parallel) {
    std::vector<uint16_t> send(tokens * token_values);
    for (size_t t = 0; t < tokens; ++t) pack(t, std::span(send).subspan(t * token_values, token_values));
    std::vector<uint16_t> received(static_cast<size_t>(tp) * send.size());
    ENGRAM_RETURN_IF_ERROR(
        tp_group.all_gather(std::as_bytes(std::span(send)), std::as_writable_bytes(std::span(received))));
    for (int from = 0; from < tp; ++from)
      for (size_t t = 0; t < tokens; ++t)
        unpack(from, std::span<const uint16_t>(received).subspan((static_cast<size_t>(from) * tokens + t) * token_values,
                                                                 token_values),
               t);
  } else {
    // Chunk for TP rank u: its token shard of this rank's block.
    const size_t chunk_values = out_tokens * token_values;
    std::vector<uint16_t> send(static_cast<size_t>(tp) * chunk_values);
    for (int to = 0; to < tp; ++to)
      for (size_t k = 0; k < out_tokens; ++k)
        pack(static_cast<size_t>(to) * out_tokens + k,
             std::span(send).subspan(static_cast<size_t>(to) * chunk_values + k * token_values, token_values));
    std::vector<uint16_t> received(send.size());
    ENGRAM_RETURN_IF_ERROR(
        tp_group.all_to_all(std::as_bytes(std::span(send)), std::as_writable_bytes(std::span(received))));
    for (int from = 0; from < tp; ++from)
      for (size_t k = 0; k < out_tokens; ++k)
        unpack(from, std::span<const uint16_t>(received).subspan(static_cast<size_t>(from) * chunk_values +
                                                                 k * token_values, token_values),
               k);
  }

  // Strays: (token, head) entries whose row another block holds, in
  // [token][head] order per holder. Every member derives the same lists.
  const std::vector<int64_t> bounds = blocks.row_bounds(table);
  std::vector<std::vector<size_t>> strays(static_cast<size_t>(tp));
  size_t widest = 0;
  for (size_t i = 0; i < tokens * heads; ++i) {
    const int holder = TpHeadBlocks::block_of_row(bounds, request.row_ids[i]);
    if (holder < 0 || holder == blocks.block_of_head(static_cast<int>(i % heads))) continue;
    auto& list = strays[static_cast<size_t>(holder)];
    list.push_back(i);
    widest = std::max(widest, list.size());
  }
  if (widest == 0) return Status::ok();
  std::vector<uint16_t> send(widest * dim, 0);
  const auto& served = strays[static_cast<size_t>(me)];
  for (size_t k = 0; k < served.size(); ++k)
    std::copy_n(local.begin() + static_cast<std::ptrdiff_t>(served[k] * dim), dim,
                send.begin() + static_cast<std::ptrdiff_t>(k * dim));
  std::vector<uint16_t> received(static_cast<size_t>(tp) * send.size());
  ENGRAM_RETURN_IF_ERROR(
      tp_group.all_gather(std::as_bytes(std::span(send)), std::as_writable_bytes(std::span(received))));
  for (int holder = 0; holder < tp; ++holder) {
    const auto& list = strays[static_cast<size_t>(holder)];
    for (size_t k = 0; k < list.size(); ++k) {
      const size_t token = list[k] / heads;
      if (token < first_token || token >= first_token + out_tokens) continue;  // another TP rank's shard
      std::copy_n(received.begin() + static_cast<std::ptrdiff_t>((static_cast<size_t>(holder) * widest + k) * dim), dim,
                  request.output.begin() +
                      static_cast<std::ptrdiff_t>(((token - first_token) * heads + list[k] % heads) * dim));
    }
  }
  return Status::ok();
}

}  // namespace engram
