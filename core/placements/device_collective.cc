#include "core/placements/device_collective.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/backend/device_resources.h"
#include "core/base/units.h"
#include "core/deployment/deployment.h"
#include "core/exchange/group_agreement.h"
#include "core/placements/device_row_shards.h"
#include "core/placements/host_lookup_staging.h"

namespace engram {
namespace {

// One rank's shard of every table in its VMM memory, filled on its device;
// the group's device collectives and the buffers its lookups use.
class DeviceCollectiveTables final : public PlacementTables {
 public:
  bool device_lookup_ready() const override { return true; }  // built only with a device
  DeviceCollectiveTables(RankBackend& backend, Collectives& group)
      : backend_(backend), compute_(*backend.compute), group_(group) {}

  ~DeviceCollectiveTables() override {
    // Local clean-up: users of the buffers first, then the buffers; each
    // MappedAllocation gives back its shard itself.
    compute_.synchronize({}).ignore();
    free_device_buffers().ignore();
  }

  // The device lookup with a copy on each side; then every member's header,
  // so a group whose ranks asked for different tables fails the step on
  // every rank, naming the odd one.
  Status lookup(int table_index, const LookupRequest& request) override {
    const int me = group_.world_rank();
    return staging_.run(compute_, request, me, [&](const DeviceLookupRequest& d) -> Status {
      bool took_part = false;
      const Table& t = tables_[static_cast<size_t>(table_index)];
      const Status looked = lookup_collective_on_device(compute_, *comm_, workspace_, owned_rows(t), table_index, d, me,
                                                        GroupHeaders::kCarried, &took_part);
      if (!took_part) return looked;  // the headers gathered are not this step's
      ENGRAM_RETURN_IF_ERROR(compute_.synchronize(d.stream).with_context(me, -1, "lookup"));
      const Status headers = check_device_group_headers(compute_, workspace_, d, me);
      return looked.is_ok() ? headers : looked;
    });
  }

  Status lookup_device(int table_index, const DeviceLookupRequest& r) override {
    const Table& t = tables_[static_cast<size_t>(table_index)];
    return lookup_collective_on_device(compute_, *comm_, workspace_, owned_rows(t), table_index, r,
                                       group_.world_rank(), GroupHeaders::kNone);
  }

  Status release() override {
    Status first = compute_.synchronize({});
    Status freed = free_device_buffers();
    if (first.is_ok()) first = std::move(freed);
    for (Table& t : tables_) {
      Status released = t.shard.release();
      if (first.is_ok()) first = std::move(released);
    }
    return first;
  }

  // Every table's shard and the lookup's buffers, then one agreement: on any
  // rank's failure every rank gives back what it built and returns the
  // group's verdict. The communicator comes after: its set-up is itself a
  // collective of the whole group.
  Status build(const PlacementContext& context) {
    const int me = group_.world_rank();
    Status status;
    for (const TableSpec& spec : context.model.tables) {
      status = build_shard(spec, context.fill_seed);
      if (!status.is_ok()) break;
    }
    if (status.is_ok()) status = build_buffers(context);
    Status agreed = agree_on_status(group_, status, "device shard build");
    if (agreed.is_ok()) {
      auto comm = compute_.connect(group_);
      if (comm.is_ok()) comm_ = std::move(comm).value();
      else agreed = std::move(comm).take_status().with_context(me, -1, "connect");
    }
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
  };

  OwnedRows owned_rows(const Table& t) const {
    return OwnedRows{t.layout.shard_begin(group_.rank()), t.layout.shard_rows(group_.rank()), t.shard.address(),
                     nullptr};
  }

  Status build_shard(const TableSpec& spec, uint64_t fill_seed) {
    const int me = group_.world_rank();
    DeviceMemory& device = *backend_.device;
    Table& t = tables_.emplace_back(Table{RowShardLayout(spec.row_count(), group_.size()), {}});
    const int64_t rows = t.layout.shard_rows(group_.rank());
    const uint64_t shard_bytes = static_cast<uint64_t>(rows) * spec.row_bytes();
    auto info = device.info();
    if (!info.is_ok()) return std::move(info).take_status().with_context(me, -1, "device info");
    const uint64_t bytes = round_up(std::max<uint64_t>(shard_bytes, 1), info->granularity_bytes);
    // Never exported (NCCL reads it in place): plain memory, which every
    // driver gives, whatever handle types it exports.
    auto shard = MappedAllocation::create(device, bytes, HandleType::kNone);
    if (!shard.is_ok()) return std::move(shard).take_status().with_context(me, -1, "create");
    t.shard = std::move(shard).value();
    // Filled by its own device, at device speed.
    ENGRAM_RETURN_IF_ERROR(compute_.fill_table_rows(t.shard.address(), spec, fill_seed,
                                                    t.layout.shard_begin(group_.rank()), rows, {})
                               .with_context(me, -1, "fill"));
    ENGRAM_RETURN_IF_ERROR(compute_.synchronize({}).with_context(me, -1, "fill"));
    footprint_.device_bytes += bytes;
    return Status::ok();
  }

  Status build_buffers(const PlacementContext& context) {
    const int me = group_.world_rank();
    auto workspace =
        make_collective_workspace(compute_, context.tokens_per_rank_max, context.model, group_.size(), me);
    if (!workspace.is_ok()) return std::move(workspace).take_status().with_context(me, -1, "lookup buffers");
    workspace_ = *workspace;
    auto staging = HostLookupStaging::make(compute_, context.model, context.tokens_per_rank_max);
    if (!staging.is_ok()) return std::move(staging).take_status().with_context(me, -1, "lookup buffers");
    staging_ = std::move(staging).value();
    return Status::ok();
  }

  Status free_device_buffers() {
    Status first = free_collective_workspace(compute_, workspace_);
    Status freed = staging_.release(compute_);
    if (first.is_ok()) first = std::move(freed);
    comm_.reset();
    return first;
  }

  RankBackend& backend_;
  DeviceCompute& compute_;
  Collectives& group_;
  std::vector<Table> tables_;
  std::unique_ptr<DeviceCollectives> comm_;
  CollectiveWorkspace workspace_;
  HostLookupStaging staging_;
};

}  // namespace

namespace device_collective_ops {

PlacementCost cost(const ModelSpec& model, const PlacementCostInput& in) {
  return {.hbm_table_bytes = device_shard_hbm_bytes(model, in.shard_group_size, in.vmm_granularity_bytes),
          .hbm_buffer_bytes = collective_buffer_bytes(model, in.shard_group_size, in.tokens_per_rank_max)};
}

Status capable(const RankBackend& backend) { return needs_a_device(backend, Placement::kDeviceCollective); }

Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context) {
  auto tables = std::make_unique<DeviceCollectiveTables>(context.backend, context.group);
  ENGRAM_RETURN_IF_ERROR(tables->build(context));
  return std::unique_ptr<PlacementTables>(std::move(tables));
}

std::string doctor_verdict(const DoctorFacts& facts) {
  if (!facts.have_gpus) return "unavailable: no GPU";
  return "NCCL all-gather + reduce-scatter over the TP group; table/tp HBM per GPU";
}

}  // namespace device_collective_ops

uint64_t collective_buffer_bytes(const ModelSpec& spec, int group_size, int tokens_per_rank_max) {
  ENGRAM_CHECK(group_size >= 1 && tokens_per_rank_max >= 0);
  uint64_t widest = 0;
  for (const TableSpec& t : spec.tables)
    widest = std::max(widest, static_cast<uint64_t>(t.head_count()) * static_cast<uint64_t>(t.dim));
  return static_cast<uint64_t>(group_size) * static_cast<uint64_t>(tokens_per_rank_max) * widest * 2;
}

// Ids all-gathered over the shard group, each rank's owned rows gathered
// into a zero-filled [group x tokens] buffer, the rows summed back
// (reduce-scatter; an engine that all-reduces says so in its rules).
StepTime device_collective_ops::step_time(const StepCostInput& in, const StepConstants& c) {
  StepBuilder b(in, c);
  const int g = in.group_size;
  const double tokens = in.rules.pads_to_slot ? std::max(in.tokens, in.tokens_slot) : in.tokens;
  const double rows = tokens * in.heads;  // owned: g x tokens x heads / g
  b.launch();
  b.collective("ids", CollectiveKind::kAllGather, g, in.group_link, step_ids_bytes(in, g));
  b.local_gather("owned rows + zero fill", rows, g * rows);
  b.collective("rows back", in.rules.row_shards_back, g, in.group_link, g * rows * static_cast<double>(in.out_row_bytes));
  if (g == 1) b.hbm_copy("copy out", 2 * rows * static_cast<double>(in.out_row_bytes));
  return b.finish();
}

}  // namespace engram
