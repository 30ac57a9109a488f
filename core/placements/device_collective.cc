#include "core/placements/device_collective.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/backend/device_resources.h"
#include "core/base/units.h"
#include "core/exchange/group_agreement.h"
#include "core/lookup/lookup_rows.h"
#include "core/model/table_fill.h"
#include "core/placements/device_row_shards.h"

namespace engram {
namespace {

// One rank's shard of every table: its rows in VMM memory, and the host copy
// the CPU lookup reads (read back from the device, so it is what the device
// holds, not what was meant to be written).
class DeviceCollectiveTables final : public PlacementTables {
 public:
  explicit DeviceCollectiveTables(Collectives& group) : group_(group) {}

  Status lookup(int table_index, const LookupRequest& request) override {
    const Table& t = tables_[static_cast<size_t>(table_index)];
    return lookup_device_collective(group_, request, t.layout, t.shard_host);
  }

  Status release() override {
    Status first;
    for (Table& t : tables_) {
      Status released = t.shard.release();
      if (first.is_ok()) first = std::move(released);
    }
    return first;
  }

  // Every table's shard, then one agreement: on any rank's failure every
  // rank gives back what it built and returns the group's verdict.
  Status build(DeviceMemory& device, const ModelSpec& model, uint64_t fill_seed) {
    Status status;
    for (const TableSpec& spec : model.tables) {
      status = build_shard(device, spec, fill_seed);
      if (!status.is_ok()) break;
    }
    Status agreed = agree_on_status(group_, status, "device shard build");
    if (!agreed.is_ok()) {
      release().ignore();
      footprint_.device_bytes = 0;
    }
    return agreed;
  }

 private:
  struct Table {
    RowShardLayout layout;
    MappedAllocation shard;
    std::vector<std::byte> shard_host;
  };

  Status build_shard(DeviceMemory& device, const TableSpec& spec, uint64_t fill_seed) {
    const int me = group_.world_rank();
    Table& t = tables_.emplace_back(Table{RowShardLayout(spec.row_count(), group_.size()), {}, {}});
    const uint64_t shard_bytes = static_cast<uint64_t>(t.layout.shard_rows(group_.rank())) * spec.row_bytes();
    auto info = device.info();
    if (!info.is_ok()) return std::move(info).take_status().with_context(me, -1, "device info");
    const uint64_t bytes = round_up(std::max<uint64_t>(shard_bytes, 1), info->granularity_bytes);
    auto shard = MappedAllocation::create(device, bytes, HandleType::kPosixFd);
    if (!shard.is_ok()) return std::move(shard).take_status().with_context(me, -1, "create");
    t.shard = std::move(shard).value();
    t.shard_host.resize(shard_bytes);
    fill_table_rows(spec, fill_seed, t.layout.shard_begin(group_.rank()), t.shard_host);
    ENGRAM_RETURN_IF_ERROR(device.copy_to_device(t.shard.address(), t.shard_host).with_context(me, -1, "fill"));
    // The CPU lookup reads what the device holds, not what we meant to write.
    ENGRAM_RETURN_IF_ERROR(
        device.copy_from_device(t.shard_host, t.shard.address()).with_context(me, -1, "read back"));
    footprint_.device_bytes += bytes;
    return Status::ok();
  }

  Collectives& group_;
  std::vector<Table> tables_;
};

PlacementCost cost(const ModelSpec& model, const PlacementCostInput& in) {
  return {.hbm_table_bytes = device_shard_hbm_bytes(model, in.shard_group_size, in.vmm_granularity_bytes),
          .hbm_buffer_bytes = collective_buffer_bytes(model, in.shard_group_size, in.tokens_per_rank_max)};
}

Status capable(const RankBackend& backend) { return needs_a_device(backend, Placement::kDeviceCollective); }

Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context) {
  auto tables = std::make_unique<DeviceCollectiveTables>(context.group);
  ENGRAM_RETURN_IF_ERROR(tables->build(*context.backend.device, context.model, context.fill_seed));
  return std::unique_ptr<PlacementTables>(std::move(tables));
}

}  // namespace

const PlacementOps& device_collective_ops() {
  static const PlacementOps ops{.id = Placement::kDeviceCollective, .name = "device_collective", .needs_device = true,
                                .group = PlacementGroup::kShardGroup, .collective_lookup = true, .cost = cost,
                                .capable = capable, .build = build};
  return ops;
}

uint64_t collective_buffer_bytes(const ModelSpec& spec, int group_size, int tokens_per_rank_max) {
  ENGRAM_CHECK(group_size >= 1 && tokens_per_rank_max >= 0);
  uint64_t widest = 0;
  for (const TableSpec& t : spec.tables)
    widest = std::max(widest, static_cast<uint64_t>(t.head_count()) * static_cast<uint64_t>(t.dim));
  return static_cast<uint64_t>(group_size) * static_cast<uint64_t>(tokens_per_rank_max) * widest * 2;
}

Status lookup_device_collective(Collectives& group, const LookupRequest& request, const RowShardLayout& layout,
                                std::span<const std::byte> own_shard_bytes) {
  const int world_rank = group.world_rank();
  // A malformed request still takes its part in the group's collectives (all
  // DEAD ids, nothing written) so its peers finish instead of waiting on it;
  // only a request without a table or a slot cannot, since the buffer sizes
  // come from them.
  const Status shape = check_request_shape(request, world_rank);
  if (!shape.is_ok() && (request.table == nullptr || request.tokens_per_rank_max <= 0)) return shape;
  const TableSpec& table = *request.table;
  if (layout.shard_count() != group.size() || layout.row_count() != table.row_count())
    return invalid_argument(fmt::format("device_collective: layout of {} rows in {} shards does not fit layer {} "
                                        "({} rows) over a group of {}",
                                        layout.row_count(), layout.shard_count(), table.layer_id, table.row_count(),
                                        group.size()))
        .with_context(world_rank, -1, "lookup");
  const uint64_t shard_bytes_expected = static_cast<uint64_t>(layout.shard_rows(group.rank())) * table.row_bytes();
  if (own_shard_bytes.size() != shard_bytes_expected)
    return invalid_argument(fmt::format("device_collective: shard {} holds {} bytes; {} rows of {} B need {}",
                                        group.rank(), own_shard_bytes.size(), layout.shard_rows(group.rank()),
                                        table.row_bytes(), shard_bytes_expected))
        .with_context(world_rank, -1, "lookup");

  const Status slot =
      shape.is_ok() ? check_slot(request.token_count(), request.tokens_per_rank_max, world_rank) : shape;
  const std::vector<int64_t> mine = header_and_slot(request, slot.is_ok(), world_rank);

  const size_t group_size = static_cast<size_t>(group.size());
  std::vector<int64_t> gathered(mine.size() * group_size);
  ENGRAM_RETURN_IF_ERROR(group.all_gather(std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(gathered))));
  // A group that did not ask for one table still finishes the step's
  // collectives, then fails on every rank.
  const Status agreed = check_group_headers(gathered, mine.size(), request, world_rank);
  const std::vector<int64_t> all_ids = ids_without_headers(gathered, mine.size());

  const size_t slot_values = static_cast<size_t>(request.tokens_per_rank_max) *
                             static_cast<size_t>(request.values_per_token());
  std::vector<uint16_t> owned(slot_values * group_size);
  lookup_rows_owned(table, layout, group.rank(), own_shard_bytes, all_ids, owned);

  if (slot.is_ok() && request.output.size() == slot_values) {
    // A full slot: sum straight into the output (the step's largest buffer saved).
    ENGRAM_RETURN_IF_ERROR(group.reduce_scatter_sum_bf16(owned, request.output));
    return agreed;
  }
  std::vector<uint16_t> summed(slot_values);
  ENGRAM_RETURN_IF_ERROR(group.reduce_scatter_sum_bf16(owned, summed));
  ENGRAM_RETURN_IF_ERROR(slot);
  ENGRAM_RETURN_IF_ERROR(agreed);
  std::copy_n(summed.begin(), request.output.size(), request.output.begin());
  return Status::ok();
}

}  // namespace engram
