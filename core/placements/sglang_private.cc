#include "core/placements/sglang_private.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/base/units.h"
#include "core/deployment/deployment.h"
#include "core/lookup/lookup_rows.h"
#include "core/lookup/shard_layout.h"
#include "core/placements/private_host_rows.h"

namespace engram {
namespace {

RowRange row_shard(const TableSpec& table, const Collectives& group, const Collectives&) {
  const RowShardLayout layout(table.row_count(), group.size());
  return {layout.shard_begin(group.rank()), layout.shard_rows(group.rank())};
}

}  // namespace

namespace sglang_private_ops {

PlacementCost cost(const ModelSpec& model, const PlacementCostInput& in) {
  // The largest shard (shards differ by at most a row).
  uint64_t bytes = 0;
  for (const TableSpec& t : model.tables)
    bytes += static_cast<uint64_t>(RowShardLayout(t.row_count(), in.shard_group_size).max_shard_rows()) * t.row_bytes();
  return {.host_private_bytes = bytes, .table_copy = TableCopyScope::kShardGroup};
}

Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context) {
  return build_private_host_rows(context, row_shard, lookup_sglang_private, DeviceRowsLookup::kNone);
}

void ask_plan_for(EngramConfig& config) {
  config.cpu_offload = true;
  config.placement = "sglang_private";
}

std::string doctor_verdict(const DoctorFacts& facts) {
  return fmt::format("available: one table split into row shards over the row-shard group ({} in all), a collective "
                     "per lookup",
                     format_gib(facts.tables_bytes));
}

}  // namespace sglang_private_ops

Status lookup_sglang_private(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                             std::span<const std::byte> shard_bytes) {
  const int world_rank = group.world_rank();
  const Status shape = check_request_shape(request, world_rank);
  // Without a table or a slot the buffers cannot be sized: nothing to join with.
  if (!shape.is_ok() && (request.table == nullptr || request.tokens_per_rank_max <= 0)) return shape;
  const TableSpec& table = *request.table;
  const RowShardLayout layout(table.row_count(), group.size());
  const int64_t first_row = layout.shard_begin(group.rank());
  const int64_t row_count = layout.shard_rows(group.rank());
  Status own = shape.is_ok() ? check_slot(request.token_count(), request.tokens_per_rank_max, world_rank) : shape;
  if (own.is_ok() && request.sequence_parallel_shards != 1 && request.sequence_parallel_shards != tp_group.size())
    own = invalid_argument(fmt::format("lookup: sequence parallelism over {} TP ranks, but this replica has {}",
                                       request.sequence_parallel_shards, tp_group.size()))
              .with_context(world_rank, -1, "lookup");
  const bool bytes_right = shard_bytes.size() == static_cast<uint64_t>(row_count) * table.row_bytes();
  if (own.is_ok() && !bytes_right)
    own = invalid_argument(fmt::format("sglang_private: member {} of {} holds rows [{}, {}) of layer {}: {} bytes "
                                       "expected, its shard holds {}",
                                       group.rank(), group.size(), first_row, first_row + row_count, table.layer_id,
                                       static_cast<uint64_t>(row_count) * table.row_bytes(), shard_bytes.size()))
              .with_context(world_rank, -1, "lookup");

  // Every member's ids (SGLang's dp_gather_replicate), a malformed request's all DEAD.
  const std::vector<int64_t> mine = header_and_slot(request, own.is_ok(), world_rank);
  const size_t members = static_cast<size_t>(group.size());
  std::vector<int64_t> gathered(mine.size() * members);
  ENGRAM_RETURN_IF_ERROR(group.all_gather(std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(gathered))));
  const Status agreed = check_group_headers(gathered, mine.size(), request, world_rank);
  const std::vector<int64_t> all_ids = ids_without_headers(gathered, mine.size());

  // The rows this member owns for every member's tokens, zero elsewhere; the
  // sum over the group hands each member its own slot (SGLang's reduce-scatter).
  const size_t slot_values = static_cast<size_t>(request.tokens_per_rank_max) *
                             static_cast<size_t>(request.values_per_token());
  std::vector<uint16_t> owned(members * slot_values, 0);
  if (bytes_right && agreed.is_ok())
    lookup_rows_in_range(table, first_row, row_count, shard_bytes, all_ids, owned);
  std::vector<uint16_t> summed(slot_values);
  // SGLang's all-reduce sums (-0 + +0 is +0); a table that keeps -0 on every
  // path (vLLM's rule, this placement forced under it) combines the
  // members' rows bit for bit instead, as the device collective does.
  ENGRAM_RETURN_IF_ERROR(table.minus_zero == MinusZeroRule::kKeep
                             ? reduce_scatter_max_bytes(group, std::as_bytes(std::span<const uint16_t>(owned)),
                                                        std::as_writable_bytes(std::span(summed)))
                             : group.reduce_scatter_sum_bf16(owned, summed));
  ENGRAM_RETURN_IF_ERROR(own);
  ENGRAM_RETURN_IF_ERROR(agreed);

  // Every token, or under sequence parallelism this TP rank's shard, zero-padded.
  const size_t per_token = static_cast<size_t>(request.values_per_token());
  const size_t out_tokens = static_cast<size_t>(request.output_token_count());
  const size_t first = request.sequence_parallel_shards == 1 ? 0 : out_tokens * static_cast<size_t>(tp_group.rank());
  const size_t last = std::min(first + out_tokens, static_cast<size_t>(request.token_count()));
  std::fill(request.output.begin(), request.output.end(), uint16_t{0});
  if (first < last)
    std::copy(summed.begin() + static_cast<std::ptrdiff_t>(first * per_token),
              summed.begin() + static_cast<std::ptrdiff_t>(last * per_token), request.output.begin());
  return Status::ok();
}

// Row shards over the group in host memory: each rank reads the rows it
// owns of every token (tokens x heads / group), then the group sums them
// (all-reduce).
StepTime sglang_private_ops::step_time(const StepCostInput& in, const StepConstants& c) {
  StepBuilder b(in, c);
  const int g = in.group_size;
  const double rows = static_cast<double>(in.tokens) * in.heads;
  b.launch();
  b.host_rows(rows / g);
  b.collective("rows summed", CollectiveKind::kAllReduce, g, in.group_link, rows * static_cast<double>(in.out_row_bytes));
  return b.finish();
}

Status sglang_private_ops::lookup_from_whole_table(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                                   std::span<const std::byte> whole_table_bytes) {
  const RowShardLayout rows(request.table->row_count(), group.size());
  const uint64_t row_bytes = request.table->row_bytes();
  const uint64_t first = static_cast<uint64_t>(rows.shard_begin(group.rank()));
  const uint64_t end = static_cast<uint64_t>(rows.shard_end(group.rank()));
  return lookup_sglang_private(group, tp_group, request,
                               whole_table_bytes.subspan(static_cast<size_t>(first * row_bytes),
                                                         static_cast<size_t>((end - first) * row_bytes)));
}

}  // namespace engram
