// The device lookup: row ids and output in device memory, enqueued on the
// caller's stream through the backend's DeviceCompute and DeviceCollectives
// (core/backend/device_compute.h), with the same rules as the host lookup
// (core/lookup/lookup_types.h): DEAD and out-of-table ids give zero rows,
// -0 follows the table's MinusZeroRule, NaN stays NaN, and a rank with more tokens than the
// DP slot is an error that still takes its part in the group's collectives
// (all DEAD) so its peers finish.
//
// Nothing here allocates, synchronises or copies to the host: workspaces are
// made when the tables are built (make_*_workspace), so a lookup can be
// captured in a CUDA graph wherever the backend's gather has no host step.
//
// The pieces each placement's device lookup is made of live here; which
// placement uses which is in core/placements/.
#pragma once

#include <cstdint>

#include "core/backend/device_compute.h"
#include "core/base/status.h"
#include "core/model/table_spec.h"

namespace engram {

struct DeviceLookupRequest {
  const TableSpec* table = nullptr;
  DevicePtr row_ids = 0;            // int64 [tokens][heads] (device)
  int64_t tokens = 0;
  int64_t tokens_per_rank_max = 0;  // the DP slot of the group's collectives
  DevicePtr output = 0;             // bf16 [tokens][output heads][dim] (device)
  StreamRef stream;
  // false: take part in the group's collectives with all DEAD ids and write
  // nothing (a malformed request, or one for a table this rank does not
  // have: table_unknown, `table` then only sizes the step).
  bool contribute = true;
  bool table_unknown = false;
  // Sequence parallelism: the TP size, and `output` holds only this TP
  // rank's token shard of the replica's `tokens`, ceil(tokens / shards)
  // tokens zero-padded (as LookupRequest::sequence_parallel_shards). Only a
  // placement that trades token shards takes it (PlacementOps::
  // trades_token_shards); 1: every token.
  int sequence_parallel_shards = 1;
};

// Shapes: a table, tokens >= 0, ids and output given when tokens > 0, a
// positive slot, every token asked for (sequence_parallel_shards 1).
// Errors are invalid_argument with `world_rank` and step "lookup". The slot
// rule is checked apart (check_device_slot) because an overrunning rank still
// joins its group's collectives.
Status check_device_request(const DeviceLookupRequest& request, int world_rank);
// The same shapes for a lookup that trades token shards over `tp` TP ranks:
// sequence_parallel_shards 1 or tp.
Status check_token_shard_request(const DeviceLookupRequest& request, int world_rank, int tp);
Status check_device_slot(const DeviceLookupRequest& request, int world_rank);

// ---- one group's collective over row ranges (device_collective, and
// host_head_sharded over the rows of its heads) ----

// Buffers of one rank for lookups of up to `tokens_per_rank_max` tokens of
// `tables` (widest heads and dim), in a group of `group_size`: this rank's
// slot of ids, every member's slots, every member's rows, this rank's summed
// rows, and each table's group header.
//
// The group header: every member's slot carries, after its tokens, the
// layer it looks up and its world rank (core/lookup/lookup_types.h), so a
// host that downloads the gathered ids can tell when ranks of one group
// asked for different tables. It rides in extra "tokens" whose ids are the
// two values encoded as negative ids (-2 - value): out of every table, so
// the gather reads nothing for them, and no second collective is needed.
struct CollectiveWorkspace {
  int64_t tokens_per_rank_max = 0;
  int header_tokens = 0;       // ceil(2 / heads): the pseudo-tokens after the slot
  int heads = 0;               // every table's head count (one shape for all tables)
  int dim_max = 0;
  int group_size = 0;
  int world_rank = -1;
  int table_count = 0;
  DevicePtr slot_ids = 0;      // int64 [slot + header tokens][heads]
  DevicePtr gathered_ids = 0;  // int64 [group][slot + header tokens][heads]
  DevicePtr rows = 0;          // bf16 [group][slot + header tokens][heads][dim]
  DevicePtr mine = 0;          // bf16 [slot + header tokens][heads][dim]
  DevicePtr headers = 0;       // int64 [tables + 1][header tokens x heads]: each table's, then the unknown one's

  int64_t slot_tokens() const { return tokens_per_rank_max + header_tokens; }
};
// `summed_rows` false: only the ids and headers (rows and mine stay 0), for
// a placement that trades its rows otherwise (device_head_sharded).
Result<CollectiveWorkspace> make_collective_workspace(DeviceCompute& compute, int64_t tokens_per_rank_max,
                                                      const ModelSpec& model, int group_size, int world_rank,
                                                      bool summed_rows = true);
// Frees what make_collective_workspace allocated; the first failure, after trying all.
Status free_collective_workspace(DeviceCompute& compute, CollectiveWorkspace& workspace);

// The rows this rank holds: [first_row, first_row + row_count) of the table
// at `base` (device memory, or registered host memory with its CPU address
// in host_rows).
struct OwnedRows {
  int64_t first_row = 0;
  int64_t row_count = 0;
  DevicePtr base = 0;
  const std::byte* host_rows = nullptr;
};

// invalid_argument naming both shapes when `request` (its slot, heads, dim)
// or `group` do not fit the buffers of `workspace`.
Status check_workspace_fits(const CollectiveWorkspace& workspace, const DeviceCollectives& group,
                            const DeviceLookupRequest& request, int world_rank);

// Whether a collective lookup's slots carry the group header. Only a host
// lookup that downloads the gathered ids checks it (check_device_group_headers
// after a synchronise), so only it pays for the header tokens; a device
// lookup (graph-captured, never synchronised inside) runs without them and
// leaves the table agreement to the host path and the build's agreement.
enum class GroupHeaders : uint8_t {
  kNone,     // the slot is tokens_per_rank_max tokens: nothing rides along
  kCarried,  // the header tokens follow the slot (check_device_group_headers reads them)
};

// The first step of every collective over a group: this rank's ids padded
// to the request's slot with DEAD (all DEAD where !contribute), its header
// after them where carried, all-gathered into workspace.gathered_ids
// ([member][slot (+ header tokens)][heads]), on the request's stream. A full
// slot without headers is all-gathered straight from request.row_ids (no copy).
Status gather_group_ids(DeviceCompute& compute, DeviceCollectives& group, CollectiveWorkspace& workspace,
                        int table_index, const DeviceLookupRequest& request, bool contribute, int world_rank,
                        GroupHeaders headers);

// All-gather every member's slot of ids (DEAD-padded, with its header where
// `headers` carries it), gather the rows this rank owns for all of them (the
// others stay zero), reduce-scatter back to this rank's tokens (a sum; a
// byte-wise max where the table's -0 rule is kKeep, so -0 comes back -0):
// docs/design.md's device_collective algorithm, every step on the request's
// stream. `table_index` picks the header (request.table_unknown: the
// unknown one).
// Lean where the caller's buffers have the slot's shape (headers kNone, the
// rank contributes a full slot: tokens == tokens_per_rank_max): the
// all-gather reads request.row_ids and the reduce-scatter writes
// request.output, so the lookup is the one-process NCCL path's four steps
// (all-gather, zero fill, gather, reduce-scatter) and nothing else.
// Otherwise the ids are copied into the workspace's slot, its tail padded
// DEAD, and this rank's tokens copied out of the summed rows.
// `took_part` (optional): set once this rank's part of the group's
// collectives is enqueued, whatever is returned after (e.g. its slot error).
Status lookup_collective_on_device(DeviceCompute& compute, DeviceCollectives& group, CollectiveWorkspace& workspace,
                                   const OwnedRows& owned, int table_index, const DeviceLookupRequest& request,
                                   int world_rank, GroupHeaders headers, bool* took_part = nullptr);

// After a lookup_collective_on_device whose stream was synchronised: every
// member's header, checked as check_group_headers does (failed_precondition
// naming the first member that asked for another table). One strided
// download of each member's header words; host-side lookups only.
Status check_device_group_headers(DeviceCompute& compute, const CollectiveWorkspace& workspace,
                                  const DeviceLookupRequest& request, int world_rank);

}  // namespace engram
