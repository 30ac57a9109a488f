#include "core/placements/device_peer.h"

#include <fmt/format.h>

#include <optional>
#include <vector>

#include "core/deployment/deployment.h"
#include "core/exchange/peer_shard_table.h"
#include "core/placements/device_row_shards.h"
#include "core/placements/host_lookup_staging.h"

namespace engram {
namespace {

// One peer-shard table per Engram table (core/exchange/peer_shard_table.h):
// this rank's shard, filled on its device, and its mappings of every peer's;
// the shard table (starts and mapped bases) uploaded once so the gather
// kernel finds each row's owner; and, with the cross-check, the collective
// over the same shards.
class DevicePeerTables final : public PlacementTables {
 public:
  bool collective_cross_check_built() const override { return cross_check_.has_value(); }
  bool device_lookup_ready() const override { return true; }  // built only with a device
  DevicePeerTables(RankBackend& backend, Collectives& group)
      : backend_(backend), compute_(*backend.compute), group_(group) {}

  ~DevicePeerTables() override {
    // Local clean-up: device buffers; each PeerShardTable undoes its own part.
    if (backend_.device != nullptr) backend_.device->synchronize().ignore();
    free_device_buffers().ignore();
  }

  Status lookup(int table_index, const LookupRequest& request) override {
    return staging_.run(compute_, request, group_.world_rank(),
                        [&](const DeviceLookupRequest& d) { return lookup_device(table_index, d); });
  }

  Status lookup_device(int table_index, const DeviceLookupRequest& r) override {
    const int me = group_.world_rank();
    ENGRAM_RETURN_IF_ERROR(check_device_request(r, me));
    if (!r.contribute) return Status::ok();  // no collective to take part in
    ENGRAM_RETURN_IF_ERROR(check_device_slot(r, me));
    if (r.tokens == 0) return Status::ok();
    const Table& t = tables_[static_cast<size_t>(table_index)];
    DeviceGather g;
    g.ids = r.row_ids;
    g.tokens = r.tokens;
    g.ids_per_token = r.table->head_count();
    g.head_begin = 0;
    g.head_count = g.ids_per_token;
    g.shard_starts = t.starts;
    g.shard_bases = t.bases;
    g.shard_count = group_.size();
    g.zero_missing = true;
    g.layout = device_row_layout(*r.table);
    g.out = r.output;
    return compute_.gather(g, r.stream).with_context(me, -1, "gather_peer");
  }

  Status lookup_device_collective(int table_index, const DeviceLookupRequest& r) override {
    if (!cross_check_) return PlacementTables::lookup_device_collective(table_index, r);
    const Table& t = tables_[static_cast<size_t>(table_index)];
    const RowShardLayout& layout = t.shards.layout();
    const int me = group_.rank();
    const OwnedRows owned{layout.shard_begin(me), layout.shard_rows(me), t.shards.shard_pointers()[static_cast<size_t>(me)],
                          nullptr};
    return lookup_collective_on_device(compute_, *cross_check_->comm, cross_check_->workspace, owned, table_index, r,
                                       group_.world_rank(), GroupHeaders::kNone);
  }

  // Collective per table (SharedMapping::teardown); tables already built
  // when a later one fails are released locally by the destructor.
  Status release() override {
    Status first = compute_.synchronize({});
    Status freed = free_device_buffers();
    if (first.is_ok()) first = std::move(freed);
    for (Table& t : tables_) {
      Status torn = t.shards.teardown();
      if (first.is_ok()) first = std::move(torn);
    }
    tables_.clear();
    return first;
  }

  Status build(const PlacementContext& context) {
    const int me = group_.world_rank();
    for (const TableSpec& spec : context.model.tables) {
      const uint64_t seed = context.fill_seed;
      DeviceCompute& compute = compute_;
      // The shard is filled by its own device, at device speed.
      auto shards = PeerShardTable::build(backend_, group_, spec.row_count(), spec.row_bytes(),
                                          [&compute, &spec, seed](DevicePtr at, int64_t first_row, int64_t rows) {
                                            ENGRAM_RETURN_IF_ERROR(
                                                compute.fill_table_rows(at, spec, seed, first_row, rows, {}));
                                            return compute.synchronize({});
                                          });
      // This one left nothing behind; those built before go with this object.
      if (!shards.is_ok()) return std::move(shards).take_status();
      tables_.push_back(Table{std::move(shards).value(), 0, 0});
      Table& t = tables_.back();
      footprint_.handle_type = t.shards.handle_type();
      footprint_.device_bytes += t.shards.shard_allocation_bytes();
      const std::vector<int64_t> starts = t.shards.layout().starts();
      ENGRAM_ASSIGN_OR_RETURN(t.starts, upload(std::as_bytes(std::span(starts))));
      ENGRAM_ASSIGN_OR_RETURN(t.bases, upload(std::as_bytes(t.shards.shard_pointers())));
    }
    auto staging = HostLookupStaging::make(compute_, context.model, context.tokens_per_rank_max);
    if (!staging.is_ok()) return std::move(staging).take_status().with_context(me, -1, "lookup buffers");
    staging_ = std::move(staging).value();
    // NCCL puts one rank of a communicator on a GPU: ranks sharing one are
    // checked against the CPU reference alone.
    if (context.collective_cross_check && !context.ranks_share_gpus) {
      auto comm = compute_.connect(group_);
      if (!comm.is_ok()) return std::move(comm).take_status().with_context(me, -1, "connect");
      auto workspace = make_collective_workspace(compute_, context.tokens_per_rank_max, context.model, group_.size(), me);
      if (!workspace.is_ok()) return std::move(workspace).take_status().with_context(me, -1, "lookup buffers");
      cross_check_.emplace(CrossCheck{std::move(comm).value(), *workspace});
    }
    return Status::ok();
  }

 private:
  struct Table {
    PeerShardTable shards;
    DevicePtr starts = 0;  // int64 [group + 1]
    DevicePtr bases = 0;   // DevicePtr [group]
  };
  struct CrossCheck {
    std::unique_ptr<DeviceCollectives> comm;
    CollectiveWorkspace workspace;
  };

  Result<DevicePtr> upload(std::span<const std::byte> bytes) {
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr at, compute_.allocate(bytes.size()));
    Status copied = compute_.copy_to_device(at, bytes);
    if (!copied.is_ok()) {
      compute_.free(at).ignore();
      return std::move(copied).with_context(group_.world_rank(), -1, "upload shard table");
    }
    return at;
  }

  Status free_device_buffers() {
    Status first = staging_.release(compute_);
    for (Table& t : tables_) {
      for (DevicePtr* p : {&t.starts, &t.bases}) {
        if (*p == 0) continue;
        Status freed = compute_.free(*p);
        if (first.is_ok()) first = std::move(freed);
        *p = 0;
      }
    }
    if (cross_check_) {
      Status freed = free_collective_workspace(compute_, cross_check_->workspace);
      if (first.is_ok()) first = std::move(freed);
      cross_check_.reset();
    }
    return first;
  }

  RankBackend& backend_;
  DeviceCompute& compute_;
  Collectives& group_;
  std::vector<Table> tables_;
  HostLookupStaging staging_;
  std::optional<CrossCheck> cross_check_;
};

}  // namespace

namespace device_peer_ops {

PlacementCost cost(const ModelSpec& model, const PlacementCostInput& in) {
  return {.hbm_table_bytes = device_shard_hbm_bytes(model, in.shard_group_size, in.vmm_granularity_bytes)};
}

Status capable(const RankBackend& backend) { return needs_a_device(backend, Placement::kDevicePeer); }

Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context) {
  auto tables = std::make_unique<DevicePeerTables>(context.backend, context.group);
  ENGRAM_RETURN_IF_ERROR(tables->build(context));
  return std::unique_ptr<PlacementTables>(std::move(tables));
}

void ask_plan_for(EngramConfig& config) { config.peer_shards = true; }

std::string doctor_verdict(const DoctorFacts& facts) {
  if (!facts.have_gpus) return "unavailable: no GPU";
  if (!facts.all_vmm) return "unavailable: a GPU lacks VMM support";
  if (facts.all_fabric)
    return fmt::format("FABRIC handles (probe works, IMEX channel present, NVLink domain {}): can span hosts of that "
                       "domain",
                       facts.nvlink_domain);
  if (facts.all_posix_fd)
    return fmt::format("POSIX fds within this host only, not FABRIC: {}{}", facts.fabric_why,
                       facts.p2p_all ? "" : "; WARNING: some GPU pairs lack P2P access, their peer reads would fail");
  return "unavailable: neither FABRIC nor POSIX-fd handles work here";
}

}  // namespace device_peer_ops

// One gather kernel reading each own token's rows from the owning shard:
// (group - 1) / group of them over the group's link.
StepTime device_peer_ops::step_time(const StepCostInput& in, const StepConstants& c) {
  StepBuilder b(in, c);
  b.launch();
  b.peer_gather("rows from the shards", static_cast<double>(in.tokens) * in.heads, in.group_size);
  return b.finish();
}

}  // namespace engram
