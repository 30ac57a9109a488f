// Request schedules: how engines feed a request-state hasher step by step
// (docs/design.md section 10), drawn from a seed, each step carrying the ids
// any hasher must produce. The expected ids come from hashing each request's
// accepted sequence whole (TableHasher::hash), so running a schedule through
// a hasher checks the one invariant that holds however a sequence is cut:
// prefill chunks, decode tokens, cached prefixes, lookback ids handed to
// another instance, context-parallel shards after their halo, verify blocks
// with rejected drafts, idle slots and padding.
//
// Executors: the CPU RequestHasher (tests/request_schedule_test.cc), the
// device hasher on the emulator and on a GPU, scenarios in steps and the
// swarm. run_request_schedule drives any hasher with RequestHasher's five
// operations.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/model/hashing.h"
#include "core/model/request_hasher.h"

namespace engram::harness {

enum class ScheduleOp : uint8_t { kBegin, kExtend, kVerify, kCommit, kRelease };
const char* schedule_op_name(ScheduleOp op);

// One operation on one instance (a separate hasher: another engine instance
// in prefill/decode disaggregation, or a context-parallel rank).
struct ScheduleStep {
  ScheduleOp op = ScheduleOp::kExtend;
  int instance = 0;
  std::string what;  // for failure messages: "decode", "prefill chunk", "cp shard 1 of 4", ...
  // kBegin and kRelease.
  int32_t slot = kIdleSlot;
  std::vector<int64_t> preceding_ids;  // kBegin: oldest first (empty, a cached prefix or a lookback window)
  // kExtend and kVerify: one ragged batch (padding and idle runs included)
  // and the ids it must hash to (tokens x heads; DEAD for padding and idle).
  std::vector<int64_t> tokens;
  std::vector<RequestRun> runs;
  std::vector<int64_t> expected_row_ids;
  // kCommit.
  std::vector<VerifyCommit> commits;
};

struct RequestSchedule {
  uint64_t seed = 0;
  int instance_count = 1;
  int slot_count = 1;
  std::vector<ScheduleStep> steps;
  // Each request's accepted sequence at the end, whole (its cached prefix
  // included): what the steps' ids were checked against.
  std::vector<std::vector<int64_t>> accepted_sequences;
};

// What a drawn schedule may hold. Small by default so that 10,000 schedules
// run in CI in seconds.
struct ScheduleLimits {
  int instance_count_max = 2;
  int slot_count_max = 4;
  int request_count_max = 5;
  int steps_max = 24;
  int64_t chunk_tokens_max = 9;
  int draft_tokens_max = 4;
  int cp_degree_max = 4;
  int dead_per_mille = 80;  // DEAD (image) tokens among drawn tokens
};

// Draws a schedule for `hasher`'s table. Same seed, same schedule.
RequestSchedule draw_request_schedule(const TableHasher& hasher, uint64_t seed, const ScheduleLimits& limits = {});

// The line that reproduces a schedule's failure in a test binary.
std::string request_schedule_repro(uint64_t seed);

// Runs the schedule's steps through one hasher per instance (anything with
// RequestHasher's begin/extend/verify/commit/release) and compares every
// step's ids. The first failed call or wrong id is an error naming the
// seed, the step, and (for ids) the token, head, expected and got.
template <typename Hasher>
Status run_request_schedule(const RequestSchedule& schedule, std::vector<Hasher*> hashers) {
  ENGRAM_CHECK(static_cast<int>(hashers.size()) == schedule.instance_count);
  std::vector<int64_t> row_ids;
  for (size_t i = 0; i < schedule.steps.size(); ++i) {
    const ScheduleStep& s = schedule.steps[i];
    ENGRAM_CHECK(s.instance >= 0 && s.instance < schedule.instance_count);
    Hasher& h = *hashers[static_cast<size_t>(s.instance)];
    auto where = [&] {
      return fmt::format("schedule seed {}: step {} ({} {}, instance {})", schedule.seed, i,
                         schedule_op_name(s.op), s.what, s.instance);
    };
    Status status = Status::ok();
    switch (s.op) {
      case ScheduleOp::kBegin: status = h.begin(s.slot, s.preceding_ids); break;
      case ScheduleOp::kRelease: status = h.release(s.slot); break;
      case ScheduleOp::kCommit: status = h.commit(s.commits); break;
      case ScheduleOp::kExtend:
      case ScheduleOp::kVerify:
        row_ids.assign(s.expected_row_ids.size(), 0x5a5a5a5a);  // not DEAD, not a row: unwritten shows
        status = s.op == ScheduleOp::kExtend ? h.extend(s.tokens, s.runs, row_ids) : h.verify(s.tokens, s.runs, row_ids);
        break;
    }
    if (!status.is_ok())
      return internal_error(fmt::format("{}: the hasher refused a valid step: {}; {}", where(), status.to_string(),
                                        request_schedule_repro(schedule.seed)));
    if (s.op != ScheduleOp::kExtend && s.op != ScheduleOp::kVerify) continue;
    const size_t heads = s.tokens.empty() ? 0 : s.expected_row_ids.size() / s.tokens.size();
    for (size_t k = 0; k < row_ids.size(); ++k)
      if (row_ids[k] != s.expected_row_ids[k])
        return internal_error(fmt::format("{}: token {} head {}: row id {}, expected {} (hashing the accepted "
                                          "sequence whole); {}",
                                          where(), k / heads, k % heads, row_ids[k], s.expected_row_ids[k],
                                          request_schedule_repro(schedule.seed)));
  }
  return Status::ok();
}

}  // namespace engram::harness
