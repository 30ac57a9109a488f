#include "core/lookup/device_lookup.h"

#include <fmt/format.h>

namespace engram {

Status check_device_request(const DeviceLookupRequest& r, int world_rank) {
  auto bad = [world_rank](std::string message) {
    return Status(ErrorCode::kInvalidArgument, std::move(message), {world_rank, -1, "lookup"});
  };
  if (r.table == nullptr) return bad("device lookup: no table given");
  if (r.tokens < 0) return bad(fmt::format("device lookup: tokens {} is negative; pass 0 or more", r.tokens));
  if (r.tokens_per_rank_max <= 0) {
    return bad(fmt::format("device lookup: tokens_per_rank_max {} must be positive (the DP slot every rank of the "
                           "group pads to)", r.tokens_per_rank_max));
  }
  if (r.tokens > 0 && (r.row_ids == 0 || r.output == 0)) {
    return bad(fmt::format("device lookup: {} tokens but row_ids {:#x} / output {:#x}; pass device buffers of "
                           "tokens x heads ids and tokens x heads x dim bf16", r.tokens, r.row_ids, r.output));
  }
  return Status::ok();
}

Status check_device_slot(const DeviceLookupRequest& r, int world_rank) {
  if (r.tokens <= r.tokens_per_rank_max) return Status::ok();
  return Status(ErrorCode::kInvalidArgument,
                fmt::format("rank {} brought {} tokens but the DP slot holds {} (tokens_per_rank_max); raise "
                            "tokens_per_rank_max to at least {} or split the batch",
                            world_rank, r.tokens, r.tokens_per_rank_max, r.tokens),
                {world_rank, -1, "lookup"});
}

uint64_t CollectiveWorkspace::bytes_needed(int64_t slot, int heads, int dim, int group) {
  const uint64_t ids = static_cast<uint64_t>(slot) * static_cast<uint64_t>(heads);
  const uint64_t values = ids * static_cast<uint64_t>(dim);
  return ids * 8 + ids * 8 * static_cast<uint64_t>(group) + values * 2 * static_cast<uint64_t>(group) + values * 2;
}

Result<CollectiveWorkspace> make_collective_workspace(DeviceCompute& compute, int64_t slot, int heads, int dim,
                                                      int group) {
  ENGRAM_CHECK(slot > 0 && heads > 0 && dim > 0 && group > 0);
  CollectiveWorkspace w;
  w.tokens_per_rank_max = slot;
  w.heads_max = heads;
  w.dim_max = dim;
  w.group_size = group;
  const uint64_t ids = static_cast<uint64_t>(slot) * static_cast<uint64_t>(heads);
  const uint64_t values = ids * static_cast<uint64_t>(dim);
  const uint64_t sizes[] = {ids * 8, ids * 8 * static_cast<uint64_t>(group), values * 2 * static_cast<uint64_t>(group),
                            values * 2};
  DevicePtr* slots[] = {&w.slot_ids, &w.gathered_ids, &w.rows, &w.mine};
  for (int i = 0; i < 4; ++i) {
    auto allocated = compute.allocate(sizes[i]);
    if (!allocated.is_ok()) {
      free_collective_workspace(compute, w).ignore();  // the allocation's error is the one to report
      return std::move(allocated).take_status();
    }
    *slots[i] = *allocated;
  }
  return w;
}

Status free_collective_workspace(DeviceCompute& compute, CollectiveWorkspace& w) {
  Status first;
  for (DevicePtr* p : {&w.slot_ids, &w.gathered_ids, &w.rows, &w.mine}) {
    if (*p == 0) continue;
    Status freed = compute.free(*p);
    if (first.is_ok()) first = std::move(freed);
    *p = 0;
  }
  return first;
}

Status lookup_collective_on_device(DeviceCompute& compute, DeviceCollectives& group, CollectiveWorkspace& w,
                                   const OwnedRows& owned, const DeviceLookupRequest& r, int world_rank) {
  ENGRAM_RETURN_IF_ERROR(check_device_request(r, world_rank));
  const TableSpec& table = *r.table;
  const int heads = table.head_count();
  if (r.tokens_per_rank_max != w.tokens_per_rank_max || heads > w.heads_max || table.dim > w.dim_max ||
      group.size() != w.group_size) {
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("device lookup: slot {} x {} heads x dim {} over {} ranks does not fit the workspace "
                              "built for slot {} x {} heads x dim {} over {} ranks; pass the tokens_per_rank_max the "
                              "tables were built with",
                              r.tokens_per_rank_max, heads, table.dim, group.size(), w.tokens_per_rank_max,
                              w.heads_max, w.dim_max, w.group_size),
                  {world_rank, -1, "lookup"});
  }
  // A rank over the slot still takes its part, all DEAD, and writes nothing.
  const Status slot = check_device_slot(r, world_rank);
  const bool contribute = slot.is_ok();
  const uint64_t slot_ids = static_cast<uint64_t>(r.tokens_per_rank_max) * static_cast<uint64_t>(heads);
  const uint64_t slot_values = slot_ids * static_cast<uint64_t>(table.dim);
  const int members = group.size();
  auto step = [world_rank](Status s, const char* name) {
    return s.is_ok() ? s : std::move(s).with_context(world_rank, -1, name);
  };
  // DEAD is -1: every byte 0xff.
  ENGRAM_RETURN_IF_ERROR(step(compute.fill_async(w.slot_ids, 0xff, slot_ids * 8, r.stream), "pad ids"));
  if (contribute && r.tokens > 0) {
    ENGRAM_RETURN_IF_ERROR(step(
        compute.copy_async(w.slot_ids, r.row_ids, static_cast<uint64_t>(r.tokens) * heads * 8, r.stream), "pad ids"));
  }
  ENGRAM_RETURN_IF_ERROR(step(group.all_gather(w.slot_ids, w.gathered_ids, slot_ids * 8, r.stream), "all-gather ids"));
  DeviceGather g;
  g.ids = w.gathered_ids;
  g.tokens = r.tokens_per_rank_max * members;
  g.ids_per_token = heads;
  g.head_begin = 0;
  g.head_count = heads;
  g.range_first_row = owned.first_row;
  g.range_row_count = owned.row_count;
  g.range_base = owned.base;
  g.host_rows = owned.host_rows;
  g.layout = device_row_layout(table);
  g.out = w.rows;
  if (owned.host_rows == nullptr) {
    // Device rows: zero the buffer, then write only the owned rows (the
    // collective path as the one-process NCCL reference runs it).
    g.zero_missing = false;
    ENGRAM_RETURN_IF_ERROR(step(compute.fill_async(w.rows, 0, slot_values * 2 * members, r.stream), "zero fill"));
  } else {
    // Host rows: the gather writes a zero row for every id it does not hold,
    // so no separate zero fill, and the backend may gather on the CPU.
    g.zero_missing = true;
  }
  ENGRAM_RETURN_IF_ERROR(step(compute.gather(g, r.stream), "gather owned"));
  ENGRAM_RETURN_IF_ERROR(step(group.reduce_scatter_sum_bf16(w.rows, w.mine, slot_values, r.stream), "reduce-scatter"));
  if (!contribute) return slot;
  if (r.tokens > 0) {
    const uint64_t bytes = static_cast<uint64_t>(r.tokens) * heads * table.dim * 2;
    ENGRAM_RETURN_IF_ERROR(step(compute.copy_async(r.output, w.mine, bytes, r.stream), "copy out"));
  }
  return Status::ok();
}

}  // namespace engram
