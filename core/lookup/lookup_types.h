// What every placement's lookup takes and the rules they share (docs/design.md
// sections 2 and 4): one request per table (Engram layer) per rank, the DP
// slot, and which row ids read a row.
//
// Row-id rule, the same on every path (CPU, GPU kernels, every placement):
// an id in [0, row_count) reads that row, whichever head position it sits at;
// DEAD (-1), any other negative id and ids past the table give a zero row and
// never read or fault. (Hashing only produces ids inside the head's own
// bucket; host_head_sharded still serves an id of another head's bucket, by
// asking that bucket's holder, so it agrees with the placements that hold
// every row.)
//
// DP slot rule: every rank of a group pads its ids to tokens_per_rank_max
// with DEAD; a rank with more tokens than the slot is an error naming the
// rank, the counts and the fix, never a truncation. That rank still takes its
// part in the group's collectives (with DEAD ids) so its peers finish.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/base/status.h"
#include "core/model/table_spec.h"

namespace engram {

struct LookupRequest {
  const TableSpec* table = nullptr;
  std::span<const int64_t> row_ids;  // this rank's tokens x heads, [token][head] (TableHasher output)
  int64_t tokens_per_rank_max = 0;   // the DP slot: the most tokens any rank of the group may bring
  std::span<uint16_t> output;        // tokens x heads x dim bf16, [token][head][dim]
  // Set by a caller asked for a table it does not have: `table` is then any
  // of its tables, used only to size the collectives, so that the rank still
  // takes its part and every rank of the group fails the step instead of
  // waiting on it or reading the wrong table's rows.
  bool table_unknown = false;
  // Sequence parallelism (host placements above TP1, core/lookup/tp_assembly.h):
  // every TP rank of a replica brings the replica's ids, and `output` holds
  // only this TP rank's token shard, ceil(tokens / sequence_parallel_shards)
  // tokens, zero-padded. 1: `output` holds every token.
  int sequence_parallel_shards = 1;

  int heads() const { return table->head_count(); }
  int64_t token_count() const { return static_cast<int64_t>(row_ids.size()) / table->head_count(); }
  // Tokens `output` holds: every token, or one TP rank's shard under sequence parallelism.
  int64_t output_token_count() const {
    return (token_count() + sequence_parallel_shards - 1) / sequence_parallel_shards;
  }
  // bf16 values per token: heads x dim.
  int64_t values_per_token() const { return static_cast<int64_t>(table->head_count()) * table->dim; }
};

// Shapes of a request: a table, row ids a whole number of tokens, an output
// of exactly tokens x heads x dim, a positive slot. Errors carry world_rank.
Status check_request_shape(const LookupRequest& request, int world_rank);

// The slot rule: token_count <= tokens_per_rank_max, else invalid_argument
// naming the rank, both numbers and the fix (raise tokens_per_rank_max).
Status check_slot(int64_t token_count, int64_t tokens_per_rank_max, int world_rank);

// Both checks; what every placement runs first.
Status check_request(const LookupRequest& request, int world_rank);

// `ids` ([tokens][heads]) copied into a slot of tokens_per_rank_max tokens,
// the rest DEAD. An overrunning or malformed request contributes all DEAD.
std::vector<int64_t> pad_ids_to_slot(const LookupRequest& request, bool contribute);

// The collective paths put two words before each rank's ids in their
// all-gather: the layer it looks up (kUnknownTableTag for a table it does
// not have) and its world rank. Ranks of one group must look up the same
// table in the same step; the header lets every rank see when they did not.
constexpr size_t kGroupHeaderWords = 2;
constexpr int64_t kUnknownTableTag = -1;

// [layer or kUnknownTableTag, world_rank, pad_ids_to_slot(request, contribute)...]
std::vector<int64_t> header_and_slot(const LookupRequest& request, bool contribute, int world_rank);

// Over the gathered [member][header, slot ids] words (`stride` words per
// member): ok when every member asked for this rank's layer; else, for the
// first member that did not, failed_precondition naming both ranks, both
// tables and the fix, with peer = that member's world rank.
Status check_group_headers(std::span<const int64_t> gathered, size_t stride, const LookupRequest& request,
                           int world_rank);

// The gathered words without their headers: [member][slot ids].
std::vector<int64_t> ids_without_headers(std::span<const int64_t> gathered, size_t stride);

inline bool row_in_table(int64_t row_count, int64_t row) { return row >= 0 && row < row_count; }

}  // namespace engram
