#include "core/lookup/lookup_host_shared.h"

#include <fmt/format.h>

#include "core/lookup/lookup_rows.h"

namespace engram {

Status lookup_host_shared(Collectives& group, const LookupRequest& request,
                          std::span<const std::byte> node_table_bytes) {
  const int world_rank = group.world_rank();
  ENGRAM_RETURN_IF_ERROR(check_request(request, world_rank));
  const TableSpec& table = *request.table;
  if (node_table_bytes.size() != table.table_bytes())
    return invalid_argument(fmt::format("host_shared: the shared table of layer {} maps {} bytes; {} rows of {} B "
                                        "need {}",
                                        table.layer_id, node_table_bytes.size(), table.row_count(),
                                        table.row_bytes(), table.table_bytes()))
        .with_context(world_rank, -1, "lookup");
  lookup_rows_whole_table(table, node_table_bytes, request.row_ids, request.output);
  return Status::ok();
}

}  // namespace engram
