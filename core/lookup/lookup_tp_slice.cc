#include "core/lookup/lookup_tp_slice.h"

#include <fmt/format.h>

#include <vector>

#include "core/lookup/lookup_rows.h"
#include "core/lookup/lookup_whole_table.h"
#include "core/lookup/tp_assembly.h"
#include "core/lookup/tp_heads.h"

namespace engram {

Status lookup_tp_slice(Collectives& tp_group, const LookupRequest& request, std::span<const std::byte> slice_bytes,
                       std::string_view what) {
  const int world_rank = tp_group.world_rank();
  const int tp = tp_group.size();
  if (tp == 1 && request.sequence_parallel_shards == 1) return lookup_whole_table(tp_group, request, slice_bytes, what);

  Status own = check_request(request, world_rank);
  if (own.is_ok() && request.sequence_parallel_shards != 1 && request.sequence_parallel_shards != tp)
    own = invalid_argument(fmt::format("lookup: sequence parallelism over {} TP ranks, but this replica has {}",
                                       request.sequence_parallel_shards, tp))
              .with_context(world_rank, -1, "lookup");
  HeadRange slice;
  RowRange rows;
  if (own.is_ok()) {
    const TableSpec& table = *request.table;
    slice = tp_head_slice(table.head_count(), tp, tp_group.rank());
    rows = rows_of_heads(table, slice);
    const uint64_t expected = static_cast<uint64_t>(rows.row_count) * table.row_bytes();
    if (slice_bytes.size() != expected)
      own = invalid_argument(fmt::format("{} of layer {}, TP rank {} of {} (heads [{}, {})): holds {} bytes; {} rows "
                                         "of {} B need {}",
                                         what, table.layer_id, tp_group.rank(), tp, slice.begin, slice.end,
                                         slice_bytes.size(), rows.row_count, table.row_bytes(), expected))
                .with_context(world_rank, -1, "lookup");
  }
  ENGRAM_RETURN_IF_ERROR(agree_tp_step(tp_group, request, own));
  const TableSpec& table = *request.table;
  std::vector<uint16_t> local(static_cast<size_t>(request.token_count()) * static_cast<size_t>(request.values_per_token()));
  lookup_rows_in_range(table, rows.first_row, rows.row_count, slice_bytes, request.row_ids, local);
  return exchange_tp_heads(tp_group, request, TpHeadBlocks::tp_slices(table.head_count(), tp), local);
}

}  // namespace engram
