#include "core/lookup/device_lookup.h"

#include <fmt/format.h>

#include <vector>

#include "core/lookup/lookup_types.h"

namespace engram {
namespace {

// Header values ride as ids out of every table: -2 - value (value >= -1).
int64_t encode_header(int64_t value) { return -2 - value; }
int64_t decode_header(int64_t id) { return -2 - id; }

}  // namespace

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
  if (r.contribute && r.tokens > 0 && (r.row_ids == 0 || r.output == 0)) {
    return bad(fmt::format("device lookup: {} tokens but row_ids {:#x} / output {:#x}; pass device buffers of "
                           "tokens x heads ids and tokens x heads x dim bf16", r.tokens, r.row_ids, r.output));
  }
  if (r.sequence_parallel_shards != 1) {
    return bad(fmt::format("device lookup: sequence_parallel_shards {} asks for a TP rank's token shard, and this "
                           "placement's device lookup writes every token; pass 1 and cut the shard after it",
                           r.sequence_parallel_shards));
  }
  return Status::ok();
}

Status check_token_shard_request(const DeviceLookupRequest& r, int world_rank, int tp) {
  ENGRAM_CHECK(tp >= 1);
  if (r.sequence_parallel_shards != 1 && r.sequence_parallel_shards != tp)
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("device lookup: sequence_parallel_shards {}; use 1 (off) or the TP size {}",
                              r.sequence_parallel_shards, tp),
                  {world_rank, -1, "lookup"});
  DeviceLookupRequest every_token = r;
  every_token.sequence_parallel_shards = 1;
  return check_device_request(every_token, world_rank);
}

Status check_device_slot(const DeviceLookupRequest& r, int world_rank) {
  // One rule and one message for the host and the device lookup.
  return check_slot(r.tokens, r.tokens_per_rank_max, world_rank);
}

Result<CollectiveWorkspace> make_collective_workspace(DeviceCompute& compute, int64_t slot, const ModelSpec& model,
                                                      int group, int world_rank, bool summed_rows) {
  ENGRAM_CHECK(slot > 0 && group > 0 && !model.tables.empty());
  CollectiveWorkspace w;
  w.tokens_per_rank_max = slot;
  w.heads = model.tables[0].head_count();
  w.group_size = group;
  w.world_rank = world_rank;
  w.table_count = static_cast<int>(model.tables.size());
  for (const TableSpec& t : model.tables) {
    if (t.head_count() != w.heads) {
      return invalid_argument(fmt::format("device lookup: tables of {} and {} heads; the collective's buffers hold one "
                                          "shape, as every Engram layer of a model has", w.heads, t.head_count()));
    }
    w.dim_max = std::max(w.dim_max, t.dim);
  }
  ENGRAM_CHECK(w.heads > 0 && w.dim_max > 0);
  w.header_tokens = (static_cast<int>(kGroupHeaderWords) + w.heads - 1) / w.heads;
  const uint64_t ids = static_cast<uint64_t>(w.slot_tokens()) * static_cast<uint64_t>(w.heads);
  const uint64_t values = ids * static_cast<uint64_t>(w.dim_max);
  const uint64_t header_ids = static_cast<uint64_t>(w.header_tokens) * static_cast<uint64_t>(w.heads);
  const uint64_t sizes[] = {ids * 8, ids * 8 * static_cast<uint64_t>(group), header_ids * 8 * (model.tables.size() + 1),
                            values * 2 * static_cast<uint64_t>(group), values * 2};
  DevicePtr* slots[] = {&w.slot_ids, &w.gathered_ids, &w.headers, &w.rows, &w.mine};
  for (int i = 0; i < (summed_rows ? 5 : 3); ++i) {
    auto allocated = compute.allocate(sizes[i]);
    if (!allocated.is_ok()) {
      free_collective_workspace(compute, w).ignore();  // the allocation's error is the one to report
      return std::move(allocated).take_status();
    }
    *slots[i] = *allocated;
  }
  // Each table's header, then the unknown table's, written once here so a
  // lookup only copies device to device.
  std::vector<int64_t> headers(header_ids * (model.tables.size() + 1), kDeadId);
  for (size_t t = 0; t <= model.tables.size(); ++t) {
    const int64_t layer = t < model.tables.size() ? model.tables[t].layer_id : kUnknownTableTag;
    headers[t * header_ids] = encode_header(layer);
    headers[t * header_ids + 1] = encode_header(world_rank);
  }
  Status uploaded = compute.copy_to_device(w.headers, std::as_bytes(std::span(headers)));
  if (!uploaded.is_ok()) {
    free_collective_workspace(compute, w).ignore();
    return uploaded;
  }
  return w;
}

Status free_collective_workspace(DeviceCompute& compute, CollectiveWorkspace& w) {
  Status first;
  for (DevicePtr* p : {&w.slot_ids, &w.gathered_ids, &w.rows, &w.mine, &w.headers}) {
    if (*p == 0) continue;
    Status freed = compute.free(*p);
    if (first.is_ok()) first = std::move(freed);
    *p = 0;
  }
  return first;
}

Status check_workspace_fits(const CollectiveWorkspace& w, const DeviceCollectives& group,
                            const DeviceLookupRequest& r, int world_rank) {
  const int heads = r.table->head_count();
  if (r.tokens_per_rank_max <= w.tokens_per_rank_max && heads == w.heads && r.table->dim <= w.dim_max &&
      group.size() == w.group_size)
    return Status::ok();
  return Status(ErrorCode::kInvalidArgument,
                fmt::format("device lookup: slot {} x {} heads x dim {} over {} ranks does not fit the workspace "
                            "built for slot {} x {} heads x dim {} over {} ranks; raise tokens_per_rank_max in the "
                            "config to the largest slot a lookup uses",
                            r.tokens_per_rank_max, heads, r.table->dim, group.size(), w.tokens_per_rank_max, w.heads,
                            w.dim_max, w.group_size),
                {world_rank, -1, "lookup"});
}

int64_t group_slot_tokens(const CollectiveWorkspace& w, const DeviceLookupRequest& r, GroupHeaders headers) {
  return r.tokens_per_rank_max + (headers == GroupHeaders::kCarried ? w.header_tokens : 0);
}

bool lean_collective(const DeviceLookupRequest& r, bool contribute, GroupHeaders headers) {
  return headers == GroupHeaders::kNone && contribute && r.tokens == r.tokens_per_rank_max;
}

Status gather_group_ids(DeviceCompute& compute, DeviceCollectives& group, CollectiveWorkspace& w, int table_index,
                        const DeviceLookupRequest& r, bool contribute, int world_rank, GroupHeaders headers) {
  const int heads = r.table->head_count();
  const bool carried = headers == GroupHeaders::kCarried;
  const int64_t slot_tokens = group_slot_tokens(w, r, headers);
  const uint64_t slot_ids = static_cast<uint64_t>(slot_tokens) * static_cast<uint64_t>(heads);
  const uint64_t header_ids = static_cast<uint64_t>(w.header_tokens) * static_cast<uint64_t>(heads);
  const uint64_t tokens_ids = static_cast<uint64_t>(r.tokens_per_rank_max) * static_cast<uint64_t>(heads);
  auto step = [world_rank](Status s, const char* name) {
    return s.is_ok() ? s : std::move(s).with_context(world_rank, -1, name);
  };
  // The caller's ids have the slot's shape: the all-gather reads them.
  if (lean_collective(r, contribute, headers)) {
    ENGRAM_CHECK(r.row_ids != 0);
    return step(group.all_gather(r.row_ids, w.gathered_ids, slot_ids * 8, r.stream), "all-gather ids");
  }
  const uint64_t copied_ids = contribute ? static_cast<uint64_t>(r.tokens) * static_cast<uint64_t>(heads) : 0;
  ENGRAM_CHECK(copied_ids <= tokens_ids);
  if (copied_ids > 0)
    ENGRAM_RETURN_IF_ERROR(step(compute.copy_async(w.slot_ids, r.row_ids, copied_ids * 8, r.stream), "copy ids"));
  // DEAD is -1: every byte 0xff.
  if (copied_ids < tokens_ids)
    ENGRAM_RETURN_IF_ERROR(
        step(compute.fill_async(w.slot_ids + copied_ids * 8, 0xff, (tokens_ids - copied_ids) * 8, r.stream), "pad ids"));
  if (carried) {
    // This table's header after the tokens (the unknown table's: the last block).
    const uint64_t block = r.table_unknown ? static_cast<uint64_t>(w.table_count) : static_cast<uint64_t>(table_index);
    ENGRAM_CHECK(r.table_unknown || (table_index >= 0 && table_index < w.table_count));
    ENGRAM_RETURN_IF_ERROR(step(compute.copy_async(w.slot_ids + tokens_ids * 8, w.headers + block * header_ids * 8,
                                                   header_ids * 8, r.stream),
                                "header"));
  }
  return step(group.all_gather(w.slot_ids, w.gathered_ids, slot_ids * 8, r.stream), "all-gather ids");
}

Status lookup_collective_on_device(DeviceCompute& compute, DeviceCollectives& group, CollectiveWorkspace& w,
                                   const OwnedRows& owned, int table_index, const DeviceLookupRequest& r,
                                   int world_rank, GroupHeaders headers, bool* took_part) {
  ENGRAM_RETURN_IF_ERROR(check_device_request(r, world_rank));
  ENGRAM_CHECK(w.rows != 0 && w.mine != 0);  // built with summed_rows
  const TableSpec& table = *r.table;
  const int heads = table.head_count();
  ENGRAM_RETURN_IF_ERROR(check_workspace_fits(w, group, r, world_rank));
  // A rank over the slot (or one told not to contribute) still takes its
  // part, all DEAD, and writes nothing.
  const Status slot = check_device_slot(r, world_rank);
  const bool contribute = r.contribute && slot.is_ok();
  // This call's slot (at most the workspace's), then the header tokens where carried.
  const int64_t slot_tokens = group_slot_tokens(w, r, headers);
  // The caller's buffers have the slot's shape: no copy on either side.
  const bool lean = lean_collective(r, contribute, headers);
  const uint64_t slot_values =
      static_cast<uint64_t>(slot_tokens) * static_cast<uint64_t>(heads) * static_cast<uint64_t>(table.dim);
  const int members = group.size();
  auto step = [world_rank](Status s, const char* name) {
    return s.is_ok() ? s : std::move(s).with_context(world_rank, -1, name);
  };
  ENGRAM_RETURN_IF_ERROR(gather_group_ids(compute, group, w, table_index, r, contribute, world_rank, headers));
  DeviceGather g;
  g.ids = w.gathered_ids;
  g.tokens = slot_tokens * members;
  g.ids_per_token = heads;
  g.head_begin = 0;
  g.head_count = heads;
  g.range_first_row = owned.first_row;
  g.range_row_count = owned.row_count;
  g.range_base = owned.base;
  g.host_rows = owned.host_rows;
  g.layout = device_row_layout(table);
  g.out = w.rows;
  // The gather writes a zero row for every id this rank does not own, so
  // the sum needs no zero fill before it: three steps where the one-process
  // NCCL reference runs four (its memset is one more node a lookup waits
  // on). Host rows: the backend may gather them on the CPU.
  g.zero_missing = true;
  ENGRAM_RETURN_IF_ERROR(step(compute.gather(g, r.stream), "gather owned"));
  const DevicePtr summed = lean ? r.output : w.mine;
  ENGRAM_CHECK(summed != 0);
  // Each id's row comes from the one member that holds it, zero rows from the
  // others. Summed, -0 + +0 is +0 (engramlab's rule, SGLang's all-reduce);
  // where the table keeps -0 on every path (vLLM) the members' bytes are
  // combined by a byte-wise max instead, which is the holder's row bit for bit.
  ENGRAM_RETURN_IF_ERROR(step(table.minus_zero == MinusZeroRule::kKeep
                                  ? group.reduce_scatter_max_bytes(w.rows, summed, slot_values * 2, r.stream)
                                  : group.reduce_scatter_sum_bf16(w.rows, summed, slot_values, r.stream),
                              "reduce-scatter"));
  if (took_part != nullptr) *took_part = true;
  if (!r.contribute) return Status::ok();
  if (!slot.is_ok()) return slot;
  if (!lean && r.tokens > 0) {
    const uint64_t bytes = static_cast<uint64_t>(r.tokens) * heads * table.dim * 2;
    ENGRAM_RETURN_IF_ERROR(step(compute.copy_async(r.output, w.mine, bytes, r.stream), "copy out"));
  }
  return Status::ok();
}

Status check_device_group_headers(DeviceCompute& compute, const CollectiveWorkspace& w,
                                  const DeviceLookupRequest& request, int world_rank) {
  const uint64_t header_ids = static_cast<uint64_t>(w.header_tokens) * static_cast<uint64_t>(w.heads);
  const uint64_t member_ids =
      static_cast<uint64_t>(request.tokens_per_rank_max + w.header_tokens) * static_cast<uint64_t>(w.heads);
  const uint64_t tokens_ids = static_cast<uint64_t>(request.tokens_per_rank_max) * static_cast<uint64_t>(w.heads);
  // [member][layer, world rank], as check_group_headers reads them: one
  // strided copy of each member's first header words.
  std::vector<int64_t> headers(static_cast<size_t>(w.group_size) * kGroupHeaderWords);
  ENGRAM_CHECK(header_ids >= kGroupHeaderWords);
  ENGRAM_RETURN_IF_ERROR(compute
                             .copy_to_host_strided(std::as_writable_bytes(std::span(headers)),
                                                   w.gathered_ids + tokens_ids * 8, kGroupHeaderWords * 8,
                                                   member_ids * 8)
                             .with_context(world_rank, -1, "check headers"));
  for (int64_t& word : headers) word = decode_header(word);
  LookupRequest as_host;
  as_host.table = request.table;
  as_host.table_unknown = request.table_unknown;
  return check_group_headers(headers, kGroupHeaderWords, as_host, world_rank);
}

}  // namespace engram
