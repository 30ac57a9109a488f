#include "core/lookup/lookup_whole_table.h"

#include <fmt/format.h>

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

}  // namespace engram
