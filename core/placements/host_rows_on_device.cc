#include "core/placements/host_rows_on_device.h"

#include <fmt/format.h>

#include "core/exchange/group_agreement.h"

namespace engram {

int64_t host_lookup_ids_max(const ModelSpec& model, int64_t tokens_per_rank_max, bool serves_group, int group_size) {
  ENGRAM_CHECK(!model.tables.empty() && group_size >= 1 && tokens_per_rank_max >= 0);
  const int64_t slots = serves_group ? group_size : 1;  // every member's slot where it serves them all
  return tokens_per_rank_max * model.tables[0].head_count() * slots + 8 * group_size;
}

uint64_t host_lookup_pinned_bytes(const ModelSpec& model, int64_t tokens_per_rank_max, bool serves_group,
                                  int group_size) {
  uint64_t row_bytes_max = 0;
  for (const TableSpec& t : model.tables) row_bytes_max = std::max(row_bytes_max, t.row_bytes());
  // The stager holds each id (8 bytes) and a staged row per id.
  return static_cast<uint64_t>(host_lookup_ids_max(model, tokens_per_rank_max, serves_group, group_size)) *
         (sizeof(int64_t) + row_bytes_max);
}

HostRowsOnDevice::~HostRowsOnDevice() { release().ignore(); }

Status HostRowsOnDevice::build(DeviceCompute& compute, Collectives& group, const ModelSpec& model,
                               std::vector<std::span<const std::byte>> rows, std::vector<RowRange> ranges,
                               Lookup lookup, int64_t tokens_per_rank_max, bool ranks_share_gpus) {
  ENGRAM_CHECK(compute_ == nullptr);
  ENGRAM_CHECK(rows.size() == model.tables.size() && ranges.size() == model.tables.size());
  if (lookup == Lookup::kCollectiveOverRows && ranks_share_gpus) {
    // Every member decides alike (the flag is the deployment's), so no
    // member waits in a communicator set-up the others skipped.
    unavailable_ = fmt::format(
        "the device lookup of this host placement is the collective over the {} ranks' rows through NCCL, and ranks "
        "here share a GPU (hosts[].ranks_per_gpu above 1), which NCCL does not allow; use the host lookup, or one GPU "
        "per rank",
        group.size());
    return Status::ok();
  }
  compute_ = &compute;
  group_ = &group;
  lookup_ = lookup;
  const int me = group.world_rank();
  Status status;
  for (size_t i = 0; i < rows.size() && status.is_ok(); ++i) {
    ENGRAM_CHECK(rows[i].size() == static_cast<uint64_t>(ranges[i].row_count) * model.tables[i].row_bytes());
    Table& t = tables_.emplace_back(Table{rows[i], ranges[i], 0});
    if (t.host.empty()) continue;  // no rows held: nothing to register, nothing read
    auto device = compute.register_host(t.host);
    if (device.is_ok()) t.device = *device;
    else status = std::move(device).take_status().with_context(me, -1, "register host");
  }
  if (status.is_ok()) {
    uint64_t row_bytes_max = 0;
    for (const TableSpec& t : model.tables) row_bytes_max = std::max(row_bytes_max, t.row_bytes());
    const int64_t ids_max =
        host_lookup_ids_max(model, tokens_per_rank_max, lookup == Lookup::kCollectiveOverRows, group.size());
    status = compute.prepare_lookups(ids_max, row_bytes_max, true).with_context(me, -1, "lookup buffers");
  }
  if (status.is_ok() && lookup == Lookup::kCollectiveOverRows) {
    auto workspace = make_collective_workspace(compute, tokens_per_rank_max, model, group.size(), me);
    if (workspace.is_ok()) workspace_ = *workspace;
    else status = std::move(workspace).take_status().with_context(me, -1, "lookup buffers");
  }
  // A failed member still joins the communicator's set-up: it is the group's collective.
  if (lookup == Lookup::kCollectiveOverRows) {
    auto comm = compute.connect(group);
    if (comm.is_ok()) comm_ = std::move(comm).value();
    else if (status.is_ok()) status = std::move(comm).take_status().with_context(me, -1, "connect");
  }
  // The group's members build alike or not at all: a member left behind
  // would wait in every lookup's collectives.
  if (lookup == Lookup::kCollectiveOverRows) status = agree_on_status(group, status, "device lookup build");
  if (!status.is_ok()) release().ignore();
  return status;
}

Status HostRowsOnDevice::lookup_device(int table_index, const DeviceLookupRequest& r) {
  const int me = group_->world_rank();
  const Table& t = tables_[static_cast<size_t>(table_index)];
  if (lookup_ == Lookup::kCollectiveOverRows) {
    const OwnedRows owned{t.rows.first_row, t.rows.row_count, t.device, t.host.data()};
    return lookup_collective_on_device(*compute_, *comm_, workspace_, owned, table_index, r, me, GroupHeaders::kNone);
  }
  ENGRAM_RETURN_IF_ERROR(check_device_request(r, me));
  if (!r.contribute) return Status::ok();  // no collective to take part in
  ENGRAM_RETURN_IF_ERROR(check_device_slot(r, me));
  if (r.tokens == 0) return Status::ok();
  DeviceGather g;
  g.ids = r.row_ids;
  g.tokens = r.tokens;
  g.ids_per_token = r.table->head_count();
  g.head_begin = 0;
  g.head_count = g.ids_per_token;
  g.range_first_row = t.rows.first_row;
  g.range_row_count = t.rows.row_count;
  g.range_base = t.device;
  g.host_rows = t.host.data();
  g.zero_missing = true;
  g.layout = device_row_layout(*r.table);
  g.out = r.output;
  return compute_->gather(g, r.stream).with_context(me, -1, "gather host table");
}

Status HostRowsOnDevice::release() {
  if (compute_ == nullptr) return Status::ok();
  // Users first: nothing may still read what is unregistered next.
  Status first = compute_->synchronize({});
  comm_.reset();
  Status freed = free_collective_workspace(*compute_, workspace_);
  if (first.is_ok()) first = std::move(freed);
  for (Table& t : tables_) {
    if (t.device == 0) continue;
    Status unregistered = compute_->unregister_host(t.host);
    if (first.is_ok()) first = std::move(unregistered);
    t.device = 0;
  }
  tables_.clear();
  compute_ = nullptr;
  return first;
}

}  // namespace engram
