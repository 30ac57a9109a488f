#include "core/placements/host_head_sharded.h"

#include "core/placements/host_rows_on_device.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/deployment/deployment.h"
#include "core/lookup/lookup_rows.h"
#include "core/lookup/shard_layout.h"
#include "core/lookup/tp_assembly.h"
#include "core/lookup/tp_heads.h"
#include "core/model/row_format.h"

namespace engram {
namespace {

// This rank's Engram DP head shard: TP-major over the replica's TP ranks
// and the rank's Engram DP group (core/lookup/tp_heads.h).
HeadRange shard_heads(const TableSpec& table, const Collectives& dp_group, const Collectives& tp_group, int member) {
  return engram_head_shard(table.head_count(), tp_group.size(), tp_group.rank(), dp_group.size(), member);
}

RowRange own_heads(const TableSpec& table, const Collectives& dp_group, const Collectives& tp_group) {
  return rows_of_heads(table, shard_heads(table, dp_group, tp_group, dp_group.rank()));
}

}  // namespace

namespace host_head_sharded_ops {

PlacementCost cost(const ModelSpec& model, const PlacementCostInput& in) {
  return {.host_private_bytes =
              head_shard_host_bytes(model, in.tp_size * in.node_local_group_size,
                                    engram_head_shard_rank(in.tp_rank, in.node_local_group_size, in.node_local_index)),
          .table_copy = TableCopyScope::kNodeLocalGroup,
          // The device lookup (tp 1 only) serves the node-local group's slots.
          .host_pinned_bytes = in.tp_size == 1 ? host_lookup_pinned_bytes(model, in.tokens_per_rank_max, true,
                                                                          in.node_local_group_size)
                                               : 0};
}

Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context) {
  return build_private_host_rows(context, own_heads, lookup_host_head_sharded, DeviceRowsLookup::kHeadShards);
}

// What the plan gives for an offloaded table where host_shared cannot work:
// the bench asks as for host_shared and gets this where /dev/shm falls short.
void ask_plan_for(EngramConfig& config) { config.cpu_offload = true; }

std::string report_heads(int heads, int tp, int group_size) {
  const int shards = tp * group_size;
  ENGRAM_CHECK(shards >= 1);
  return fmt::format("; heads in {} TP-major shards of {} (shard = tp_rank x {} + group index)", shards,
                     (heads + shards - 1) / shards, group_size);
}

std::string doctor_verdict(const DoctorFacts&) {
  return "available: one table per node in host memory, each rank one TP-major shard of the heads (1/(tp x "
         "node-local replicas)), collectives per step";
}

}  // namespace host_head_sharded_ops

namespace {

size_t heads_times_dim(const TableSpec& table) {
  return static_cast<size_t>(table.head_count()) * static_cast<size_t>(table.dim);
}

// Strays: in-table ids whose row this group holds (TP rank t's block) but
// not at the head position's own shard: an id of another member's bucket at
// a position of the block, or any id of the block at a position outside it
// (the TP step then hands it to the TP rank of that position:
// core/lookup/tp_assembly.h). Hashing never makes one, but the lookup rule
// says any in-table id reads its row. Every rank sees the same gathered ids,
// so every rank finds the same strays and agrees, with no extra collective,
// whether this second exchange runs at all. The holder sends each stray row
// to the token's rank; entries go in (slot token, head) order, which sender
// and receiver both derive from the ids. Received rows land in `local`
// ([own tokens][heads][dim]) at their (token, head).
Status serve_strays(Collectives& group, const TableSpec& table, const TpHeadBlocks& blocks, int tp_rank,
                    int shard_width, RowRange my_rows, std::span<const std::byte> own_head_shard_bytes,
                    std::span<const int64_t> all_ids, size_t slot_tokens, std::span<uint16_t> local) {
  const int group_size = group.size();
  const size_t members = static_cast<size_t>(group_size);
  const int heads = table.head_count();
  const size_t dim = static_cast<size_t>(table.dim);
  const HeadRange block = blocks.block(tp_rank);
  const int64_t block_first_row = table.head_offset(block.begin);
  const int64_t block_end_row = table.head_offset(block.end);
  std::vector<int64_t> bounds(static_cast<size_t>(heads) + 1, 0);
  for (int h = 0; h < heads; ++h) bounds[static_cast<size_t>(h) + 1] = table.head_offset(h + 1);
  // The group member whose shard holds head `head` of the block.
  auto member_of_head = [&](int head) { return (head - block.begin) / shard_width; };
  auto holder_of_row = [&](int64_t row) {
    const auto it = std::upper_bound(bounds.begin(), bounds.end(), row);
    return member_of_head(static_cast<int>(it - bounds.begin()) - 1);
  };
  // strays[holder * members + member]: indexes (slot token * heads + head) into member's ids.
  std::vector<std::vector<size_t>> strays(members * members);
  size_t widest = 0;
  for (size_t member = 0; member < members; ++member) {
    for (size_t i = 0; i < slot_tokens * static_cast<size_t>(heads); ++i) {
      const int64_t row = all_ids[member * slot_tokens * static_cast<size_t>(heads) + i];
      if (row < block_first_row || row >= block_end_row) continue;  // not this group's (or not in the table)
      const int holder = holder_of_row(row);
      const int head = static_cast<int>(i % static_cast<size_t>(heads));
      if (head >= block.begin && head < block.end && holder == member_of_head(head)) continue;
      auto& list = strays[static_cast<size_t>(holder) * members + member];
      list.push_back(i);
      widest = std::max(widest, list.size());
    }
  }
  if (widest == 0) return Status::ok();

  const size_t me = static_cast<size_t>(group.rank());
  const size_t chunk_values = widest * dim;
  std::vector<uint16_t> send(members * chunk_values, 0);
  for (size_t member = 0; member < members; ++member) {
    const auto& list = strays[me * members + member];
    for (size_t k = 0; k < list.size(); ++k) {
      const int64_t row = all_ids[member * slot_tokens * static_cast<size_t>(heads) + list[k]];
      ENGRAM_CHECK(row >= my_rows.first_row && row < my_rows.first_row + my_rows.row_count);
      const uint64_t row_bytes = table.row_bytes();
      dequantize_row(table,
                     own_head_shard_bytes.subspan(static_cast<size_t>(row - my_rows.first_row) * row_bytes, row_bytes),
                     std::span(send).subspan(member * chunk_values + k * dim, dim));
    }
  }
  std::vector<uint16_t> received(members * chunk_values);
  ENGRAM_RETURN_IF_ERROR(group.all_to_all(std::as_bytes(std::span(send)), std::as_writable_bytes(std::span(received))));
  const size_t own_tokens = local.size() / heads_times_dim(table);
  for (size_t holder = 0; holder < members; ++holder) {
    const auto& list = strays[holder * members + me];
    for (size_t k = 0; k < list.size(); ++k) {
      if (list[k] / static_cast<size_t>(heads) >= own_tokens) continue;  // padding is DEAD; never a stray
      std::copy_n(received.begin() + static_cast<std::ptrdiff_t>(holder * chunk_values + k * dim), dim,
                  local.begin() + static_cast<std::ptrdiff_t>(list[k] * dim));
    }
  }
  return Status::ok();
}

}  // namespace

uint64_t head_shard_host_bytes(const ModelSpec& spec, int group_size, int index) {
  ENGRAM_CHECK(group_size >= 1 && index >= 0 && index < group_size);
  uint64_t total = 0;
  for (const TableSpec& t : spec.tables) {
    HeadRange heads = head_shard(t.head_count(), group_size, index);
    int64_t rows = 0;
    for (int h = heads.begin; h < heads.end; ++h) rows += t.primes[static_cast<size_t>(h)];
    total += static_cast<uint64_t>(rows) * t.row_bytes();
  }
  return total;
}

HeadShardRows head_shard_rows(const TableSpec& table, int group_size, int shard) {
  const HeadRange heads = head_shard(table.head_count(), group_size, shard);
  HeadShardRows rows;
  rows.first_row = table.head_offset(heads.begin);
  rows.row_count = table.head_offset(heads.end) - rows.first_row;
  ENGRAM_CHECK(rows.first_row >= 0 && rows.row_count >= 0);
  return rows;
}

Status lookup_host_head_sharded(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                                std::span<const std::byte> own_head_shard_bytes) {
  const int world_rank = group.world_rank();
  // A malformed request still takes its part in the group's collectives (all
  // DEAD ids, nothing written) so its peers finish instead of waiting on it;
  // only a request without a table or a slot cannot, since the buffer sizes
  // come from them (its TP peers still get its header: core/lookup/tp_assembly.h).
  const Status shape = check_request_shape(request, world_rank);
  if (!shape.is_ok() && (request.table == nullptr || request.tokens_per_rank_max <= 0))
    return agree_tp_step(tp_group, request, shape);
  const TableSpec& table = *request.table;
  const int group_size = group.size();
  const int tp = tp_group.size();
  const HeadRange my_heads = engram_head_shard(table.head_count(), tp, tp_group.rank(), group_size, group.rank());
  const RowRange my_rows = rows_of_heads(table, my_heads);
  const uint64_t expected = static_cast<uint64_t>(my_rows.row_count) * table.row_bytes();
  if (own_head_shard_bytes.size() != expected)
    return agree_tp_step(
        tp_group, request,
        invalid_argument(fmt::format("host_head_sharded: rank {} of {} (TP rank {} of {}, head shard {}) holds heads "
                                     "[{}, {}) of layer {}: {} rows of {} B = {} bytes, but its shard holds {} bytes",
                                     group.rank(), group_size, tp_group.rank(), tp,
                                     engram_head_shard_rank(tp_group.rank(), group_size, group.rank()), my_heads.begin,
                                     my_heads.end, table.layer_id, my_rows.row_count, table.row_bytes(), expected,
                                     own_head_shard_bytes.size()))
            .with_context(world_rank, -1, "lookup"));

  Status slot = shape.is_ok() ? check_slot(request.token_count(), request.tokens_per_rank_max, world_rank) : shape;
  if (slot.is_ok() && request.sequence_parallel_shards != 1 && request.sequence_parallel_shards != tp)
    slot = invalid_argument(fmt::format("lookup: sequence parallelism over {} TP ranks, but this replica has {}",
                                        request.sequence_parallel_shards, tp))
               .with_context(world_rank, -1, "lookup");
  const std::vector<int64_t> mine = header_and_slot(request, slot.is_ok(), world_rank);
  const size_t members = static_cast<size_t>(group_size);
  std::vector<int64_t> gathered(mine.size() * members);
  ENGRAM_RETURN_IF_ERROR(group.all_gather(std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(gathered))));
  // A group that did not ask for one table still finishes the step's
  // collectives (the exchange and the strays below), then fails on every rank.
  const Status agreed = check_group_headers(gathered, mine.size(), request, world_rank);
  const std::vector<int64_t> all_ids = ids_without_headers(gathered, mine.size());

  // This rank's heads for every token of every member: [member][slot token][my heads][dim].
  const size_t slot_tokens = static_cast<size_t>(request.tokens_per_rank_max);
  const size_t dim = static_cast<size_t>(table.dim);
  const size_t my_width = static_cast<size_t>(my_heads.size());
  std::vector<uint16_t> my_rows_out(members * slot_tokens * my_width * dim);
  lookup_rows_head_shard(table, my_heads, my_rows.first_row, own_head_shard_bytes, all_ids, my_rows_out);

  // all_to_all needs equal chunks: pad every member's part to the shard
  // width (the last shards may be short or empty).
  const int shard_width = (table.head_count() + tp * group_size - 1) / (tp * group_size);
  const size_t widest = static_cast<size_t>(shard_width);
  const size_t chunk_values = slot_tokens * widest * dim;
  std::vector<uint16_t> send;
  if (my_width == widest) {
    send = std::move(my_rows_out);  // already in the exchange's layout
  } else {
    send.assign(members * chunk_values, 0);
    for (size_t member = 0; member < members; ++member)
      for (size_t t = 0; t < slot_tokens; ++t)
        std::copy_n(my_rows_out.begin() + static_cast<std::ptrdiff_t>((member * slot_tokens + t) * my_width * dim),
                    my_width * dim,
                    send.begin() + static_cast<std::ptrdiff_t>(member * chunk_values + t * widest * dim));
  }
  std::vector<uint16_t> received(members * chunk_values);
  ENGRAM_RETURN_IF_ERROR(group.all_to_all(std::as_bytes(std::span(send)), std::as_writable_bytes(std::span(received))));
  // An overrunning rank contributed only DEAD ids: it assembles nothing but
  // still takes part in the stray exchange below.
  // At TP1 with every token wanted, rows are assembled straight into the
  // output (after a collective error its contents are unspecified; after a
  // slot error it is untouched); otherwise into this TP rank's block of
  // every own token, for the TP step.
  const size_t tokens = slot.is_ok() ? static_cast<size_t>(request.token_count()) : 0;
  const bool direct = tp == 1 && request.sequence_parallel_shards == 1;
  std::vector<uint16_t> local_rows(direct ? 0 : tokens * heads_times_dim(table), 0);
  const std::span<uint16_t> local =
      direct ? request.output.first(tokens * heads_times_dim(table)) : std::span<uint16_t>(local_rows);

  // Chunk from member m holds m's heads for this rank's tokens.
  const size_t heads = static_cast<size_t>(table.head_count());
  for (size_t member = 0; member < members; ++member) {
    const HeadRange theirs =
        engram_head_shard(table.head_count(), tp, tp_group.rank(), group_size, static_cast<int>(member));
    const size_t width = static_cast<size_t>(theirs.size());
    for (size_t t = 0; t < tokens; ++t)
      std::copy_n(received.begin() + static_cast<std::ptrdiff_t>(member * chunk_values + t * widest * dim),
                  width * dim,
                  local.begin() + static_cast<std::ptrdiff_t>((t * heads + static_cast<size_t>(theirs.begin)) * dim));
  }
  // Whether there are strays depends on the table, so a group that did not
  // agree on one skips that exchange; the check above fails on every rank
  // of such a group (each sees a header unlike its own), so all skip it.
  const TpHeadBlocks blocks = TpHeadBlocks::engram_dp_groups(table.head_count(), tp, group_size);
  Status step = !agreed.is_ok() ? (slot.is_ok() ? agreed : slot) : Status::ok();
  if (agreed.is_ok()) {
    Status served = serve_strays(group, table, blocks, tp_group.rank(), shard_width, my_rows, own_head_shard_bytes,
                                 all_ids, slot_tokens, local);
    if (!served.is_ok()) return served;  // a collective failed: the TP step would wait on a gone peer too
    step = slot;
  }
  // The TP step: every member takes part, each with its own verdict.
  ENGRAM_RETURN_IF_ERROR(agree_tp_step(tp_group, request, step));
  if (direct) return Status::ok();
  return exchange_tp_heads(tp_group, request, blocks, local);
}

// Ids all-gathered over the node-local group, each rank's heads read for
// every member's tokens, the rows brought back, then TP assembly.
StepTime host_head_sharded_ops::step_time(const StepCostInput& in, const StepConstants& c) {
  StepBuilder b(in, c);
  const int k = in.group_size;
  const double tokens = in.rules.pads_to_slot ? std::max(in.tokens, in.tokens_slot) : in.tokens;
  const double slice = (in.heads + in.tp * k - 1) / (in.tp * k);
  const double rows = k * tokens * slice;
  b.launch();
  b.collective("ids", CollectiveKind::kAllGather, k, in.group_link, step_ids_bytes(in, k));
  b.host_rows(rows);
  const CollectiveKind back = in.rules.head_shards_back;
  const double bytes = (back == CollectiveKind::kAllGather ? k * rows : rows) * static_cast<double>(in.out_row_bytes);
  b.collective("rows back", back, k, in.group_link, bytes);
  b.tp_assembly();
  return b.finish();
}

Status host_head_sharded_ops::lookup_from_whole_table(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                                   std::span<const std::byte> whole_table_bytes) {
  const HeadShardRows rows = head_shard_rows(*request.table, group.size(), group.rank());
  const uint64_t row_bytes = request.table->row_bytes();
  return lookup_host_head_sharded(group, tp_group, request,
                                  whole_table_bytes.subspan(static_cast<size_t>(static_cast<uint64_t>(rows.first_row) * row_bytes),
                                                            static_cast<size_t>(static_cast<uint64_t>(rows.row_count) * row_bytes)));
}

}  // namespace engram
