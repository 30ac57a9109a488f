#include "core/backend/device_compute.h"

#include <fmt/format.h>

#include "core/model/hashing.h"
#include "core/model/request_hash_words.h"

namespace engram {

DeviceRowLayout device_row_layout(const TableSpec& table) {
  DeviceRowLayout layout;
  layout.format = table.row_format;
  layout.dim = table.dim;
  layout.row_bytes = table.row_bytes();
  layout.scale_byte_rule = table.scale_byte_rule;
  layout.minus_zero = table.minus_zero;
  return layout;
}

TableSpec row_decode_spec(const DeviceRowLayout& layout) {
  TableSpec t;
  t.row_format = layout.format;
  t.dim = layout.dim;
  t.scale_byte_rule = layout.scale_byte_rule;
  t.minus_zero = layout.minus_zero;
  return t;
}

Status check_gather(const DeviceGather& a, int rank, int64_t prepared_ids_max) {
  const char* call = a.shard_count > 0 ? "gather_peer" : a.zero_missing ? "gather_range" : "gather_owned";
  auto bad = [rank, call](std::string message) {
    return Status(ErrorCode::kInvalidArgument, fmt::format("{}: {}", call, message), {rank, -1, "gather"});
  };
  if (a.tokens < 0 || a.ids_per_token <= 0 || a.head_begin < 0 || a.head_count <= 0 ||
      a.head_begin + a.head_count > a.ids_per_token) {
    return bad(fmt::format("tokens {} must be >= 0 and heads [{}, {}) inside the {} ids per token", a.tokens,
                           a.head_begin, a.head_begin + a.head_count, a.ids_per_token));
  }
  const bool window = a.head_begin != 0 || a.head_count != a.ids_per_token;
  if (a.shard_count > 0 && (window || !a.zero_missing)) {
    return bad("a shard source reads every head and writes zero rows for ids it does not hold");
  }
  if (a.shard_count == 0 && !a.zero_missing && window) return bad("the owned-rows gather reads every head");
  const int64_t slots = a.tokens * a.head_count;
  if (a.host_rows != nullptr && prepared_ids_max > 0 && slots > prepared_ids_max) {
    return bad(fmt::format("{} rows exceed the {} the lookups were prepared for; size it for the largest lookup "
                           "(tokens_per_rank_max)", slots, prepared_ids_max));
  }
  if (a.layout.row_bytes < row_decode_spec(a.layout).row_bytes())
    return bad(fmt::format("row_bytes {} is shorter than a row", a.layout.row_bytes));
  return Status::ok();
}

Status check_strided_copy(uint64_t dst_bytes, uint64_t row_bytes, uint64_t src_pitch_bytes, int rank) {
  auto bad = [rank](std::string message) {
    return Status(ErrorCode::kInvalidArgument, "strided copy to host: " + std::move(message),
                  {rank, -1, "copy to host"});
  };
  if (row_bytes == 0) return bad("row_bytes is 0; copy at least one byte a row");
  if (dst_bytes % row_bytes != 0)
    return bad(fmt::format("the destination's {} bytes are not whole rows of row_bytes {}; size it rows x row_bytes",
                           dst_bytes, row_bytes));
  if (row_bytes > src_pitch_bytes)
    return bad(fmt::format("row_bytes {} is wider than src_pitch_bytes {}; rows may not overlap", row_bytes,
                           src_pitch_bytes));
  return Status::ok();
}

Status check_request_state(const DeviceRequestState& state, const char* call) {
  if (state.hasher == nullptr) return invalid_argument(fmt::format("{}: state.hasher is null; give the table's hasher", call));
  if (state.slot_count < 1 || state.slot_count > kMaxDeviceRequestSlots)
    return invalid_argument(fmt::format("{}: state.slot_count is {}; it must be 1..{}", call, state.slot_count,
                                        kMaxDeviceRequestSlots));
  if (state.verify_tokens_max < 1)
    return invalid_argument(fmt::format("{}: state.verify_tokens_max is {}; a slot holds a verify block of at least "
                                        "its anchor", call, state.verify_tokens_max));
  if (state.heads == 0 || state.histories == 0 || state.pending == 0 || state.pending_counts == 0 || state.error == 0)
    return invalid_argument(fmt::format("{}: the state's heads, histories, pending, pending_counts and error must all "
                                        "be device buffers, not 0", call));
  return Status::ok();
}

Status check_request_hash(const DeviceRequestHash& args) {
  const char* call = args.verify ? "hash_requests (verify)" : "hash_requests (extend)";
  ENGRAM_RETURN_IF_ERROR(check_request_state(args.state, call));
  if (args.token_count < 0)
    return invalid_argument(fmt::format("{}: token_count is {}; it must be >= 0", call, args.token_count));
  if (args.header == 0 || args.runs == 0 || (args.token_count > 0 && (args.tokens == 0 || args.row_ids == 0)))
    return invalid_argument(fmt::format("{}: header, runs, tokens and row_ids must be device buffers, not 0", call));
  return Status::ok();
}

Status check_request_commit(const DeviceRequestCommit& args) {
  ENGRAM_RETURN_IF_ERROR(check_request_state(args.state, "commit_requests"));
  if (args.header == 0 || args.commits == 0)
    return invalid_argument("commit_requests: header and commits must be device buffers, not 0");
  return Status::ok();
}

}  // namespace engram
