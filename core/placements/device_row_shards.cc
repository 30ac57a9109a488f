#include "core/placements/device_row_shards.h"

#include "core/base/units.h"
#include "core/lookup/shard_layout.h"

namespace engram {

uint64_t device_shard_hbm_bytes(const ModelSpec& spec, int shard_count, uint64_t granularity_bytes) {
  ENGRAM_CHECK(shard_count >= 1);
  uint64_t total = 0;
  for (const TableSpec& t : spec.tables) {
    RowShardLayout layout(t.row_count(), shard_count);
    total += round_up(static_cast<uint64_t>(layout.max_shard_rows()) * t.row_bytes(), granularity_bytes);
  }
  return total;
}

}  // namespace engram
