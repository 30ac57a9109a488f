#include "harness/request_schedule.h"

#include <algorithm>

#include "core/base/rerun_command.h"
#include "core/base/splitmix64.h"

namespace engram::harness {
namespace {

// The generator's state: each request's accepted sequence and where it lives.
struct DrawnRequest {
  std::vector<int64_t> accepted;
  int instance = -1;
  int32_t slot = kIdleSlot;
  bool finished = false;
  bool active() const { return slot != kIdleSlot; }
};

class ScheduleDrawer {
 public:
  ScheduleDrawer(const TableHasher& hasher, uint64_t seed, const ScheduleLimits& limits)
      : hasher_(hasher), limits_(limits), state_(seed) {
    ENGRAM_CHECK(limits.instance_count_max >= 1 && limits.slot_count_max >= 1 && limits.request_count_max >= 1);
    ENGRAM_CHECK(limits.chunk_tokens_max >= 1 && limits.draft_tokens_max >= 0 && limits.cp_degree_max >= 1);
    schedule_.seed = seed;
    schedule_.instance_count = 1 + static_cast<int>(below(static_cast<uint64_t>(limits.instance_count_max)));
    schedule_.slot_count = 1 + static_cast<int>(below(static_cast<uint64_t>(limits.slot_count_max)));
    requests_.resize(1 + below(static_cast<uint64_t>(limits.request_count_max)));
    slot_owner_.assign(static_cast<size_t>(schedule_.instance_count),
                       std::vector<int>(static_cast<size_t>(schedule_.slot_count), -1));
  }

  RequestSchedule draw() {
    const int steps = 1 + static_cast<int>(below(static_cast<uint64_t>(limits_.steps_max)));
    for (int i = 0; i < steps; ++i) {
      switch (below(8)) {
        case 0: case 1: begin_request(); break;
        case 2: case 3: extend_batch(/*decode=*/below(2) == 0); break;
        case 4: verify_and_commit(); break;
        case 5: handover(); break;
        case 6: cp_prefill(); break;
        case 7: below(2) == 0 ? padded_step() : finish_request(); break;
      }
    }
    for (const DrawnRequest& r : requests_) schedule_.accepted_sequences.push_back(r.accepted);
    return std::move(schedule_);
  }

 private:
  uint64_t below(uint64_t n) { return n == 0 ? 0 : splitmix64_next(state_) % n; }

  int64_t draw_token() {
    if (static_cast<int>(below(1000)) < limits_.dead_per_mille) return kDeadId;
    return static_cast<int64_t>(below(static_cast<uint64_t>(hasher_.compressed_vocab_size())));
  }
  // What padding and idle slots hold: anything, in or out of the vocabulary,
  // since nothing may read it.
  int64_t draw_garbage() {
    switch (below(3)) {
      case 0: return draw_token();
      case 1: return hasher_.compressed_vocab_size() + static_cast<int64_t>(below(1000));
      default: return -2 - static_cast<int64_t>(below(1000));
    }
  }
  std::vector<int64_t> draw_tokens(int64_t count) {
    std::vector<int64_t> t(static_cast<size_t>(count));
    for (int64_t& x : t) x = draw_token();
    return t;
  }

  // The ids of `added` after `accepted`, by hashing the two whole.
  std::vector<int64_t> whole_ids(const std::vector<int64_t>& accepted, const std::vector<int64_t>& added) {
    std::vector<int64_t> all = accepted;
    all.insert(all.end(), added.begin(), added.end());
    const size_t heads = static_cast<size_t>(hasher_.head_count());
    std::vector<int64_t> ids(all.size() * heads);
    const Status s = hasher_.hash(all, {}, ids);
    ENGRAM_CHECK_MSG(s.is_ok(), s.to_string().c_str());
    return std::vector<int64_t>(ids.end() - static_cast<std::ptrdiff_t>(added.size() * heads), ids.end());
  }

  int free_slot(int instance) {
    std::vector<int> free;
    for (int s = 0; s < schedule_.slot_count; ++s)
      if (slot_owner_[static_cast<size_t>(instance)][static_cast<size_t>(s)] == -1) free.push_back(s);
    return free.empty() ? -1 : free[below(free.size())];
  }
  std::vector<int> active_requests(int instance) {
    std::vector<int> out;
    for (size_t r = 0; r < requests_.size(); ++r)
      if (requests_[r].active() && (instance < 0 || requests_[r].instance == instance)) out.push_back(static_cast<int>(r));
    return out;
  }

  void push_begin(int instance, int32_t slot, std::vector<int64_t> preceding, std::string what) {
    ScheduleStep s;
    s.op = ScheduleOp::kBegin;
    s.instance = instance;
    s.slot = slot;
    s.preceding_ids = std::move(preceding);
    s.what = std::move(what);
    schedule_.steps.push_back(std::move(s));
  }
  void push_release(int instance, int32_t slot, std::string what) {
    ScheduleStep s;
    s.op = ScheduleOp::kRelease;
    s.instance = instance;
    s.slot = slot;
    s.what = std::move(what);
    schedule_.steps.push_back(std::move(s));
  }
  void place(int r, int instance, int32_t slot) {
    requests_[static_cast<size_t>(r)].instance = instance;
    requests_[static_cast<size_t>(r)].slot = slot;
    slot_owner_[static_cast<size_t>(instance)][static_cast<size_t>(slot)] = r;
  }
  void unplace(int r) {
    DrawnRequest& q = requests_[static_cast<size_t>(r)];
    slot_owner_[static_cast<size_t>(q.instance)][static_cast<size_t>(q.slot)] = -1;
    q.instance = -1;
    q.slot = kIdleSlot;
  }
  // A lookback window as an instance hands it over: at least the n-1 ids the
  // history needs (all of them when the sequence is shorter), sometimes more.
  std::vector<int64_t> lookback(const std::vector<int64_t>& ids) {
    const size_t want = static_cast<size_t>(hasher_.history_length()) + below(3);
    const size_t n = std::min(ids.size(), want);
    return std::vector<int64_t>(ids.end() - static_cast<std::ptrdiff_t>(n), ids.end());
  }

  void begin_request() {
    std::vector<int> waiting;
    for (size_t r = 0; r < requests_.size(); ++r)
      if (!requests_[r].finished && !requests_[r].active() && requests_[r].accepted.empty())
        waiting.push_back(static_cast<int>(r));
    if (waiting.empty()) return;
    const int r = waiting[below(waiting.size())];
    const int instance = static_cast<int>(below(static_cast<uint64_t>(schedule_.instance_count)));
    const int slot = free_slot(instance);
    if (slot < 0) return;
    // A fresh sequence, or a cached prefix of any length.
    std::vector<int64_t> prefix = below(2) == 0 ? std::vector<int64_t>{} : draw_tokens(1 + below(12));
    requests_[static_cast<size_t>(r)].accepted = prefix;
    place(r, instance, slot);
    push_begin(instance, slot, std::move(prefix),
               fmt::format("request {} {}", r, requests_[static_cast<size_t>(r)].accepted.empty() ? "fresh" : "from a cached prefix"));
  }

  // One ragged batch on one instance: the given requests' new tokens in a
  // random order, padding between runs and idle runs mixed in.
  void push_batch(ScheduleOp op, int instance, const std::vector<int>& rs,
                  const std::vector<std::vector<int64_t>>& added, std::string what) {
    ScheduleStep s;
    s.op = op;
    s.instance = instance;
    s.what = std::move(what);
    const size_t heads = static_cast<size_t>(hasher_.head_count());
    std::vector<size_t> order(rs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[below(i)]);
    auto pad = [&](int64_t n) {
      for (int64_t k = 0; k < n; ++k) {
        s.tokens.push_back(draw_garbage());
        s.expected_row_ids.insert(s.expected_row_ids.end(), heads, kDeadId);
      }
    };
    for (size_t i : order) {
      if (below(3) == 0) pad(static_cast<int64_t>(below(3)));
      if (below(5) == 0) {  // an idle DP slot with tokens of its own
        s.runs.push_back(RequestRun{kIdleSlot, static_cast<int64_t>(s.tokens.size()), 1 + static_cast<int64_t>(below(2))});
        pad(s.runs.back().token_count);
      }
      const DrawnRequest& q = requests_[static_cast<size_t>(rs[i])];
      s.runs.push_back(RequestRun{q.slot, static_cast<int64_t>(s.tokens.size()), static_cast<int64_t>(added[i].size())});
      s.tokens.insert(s.tokens.end(), added[i].begin(), added[i].end());
      const std::vector<int64_t> ids = whole_ids(q.accepted, added[i]);
      s.expected_row_ids.insert(s.expected_row_ids.end(), ids.begin(), ids.end());
    }
    if (below(3) == 0) pad(static_cast<int64_t>(below(3)));
    schedule_.steps.push_back(std::move(s));
  }

  // A random subset of an instance's active requests (maybe none).
  std::vector<int> some_requests(int instance) {
    std::vector<int> all = active_requests(instance), out;
    for (int r : all)
      if (below(4) != 0) out.push_back(r);
    return out;
  }

  void extend_batch(bool decode) {
    const int instance = static_cast<int>(below(static_cast<uint64_t>(schedule_.instance_count)));
    const std::vector<int> rs = some_requests(instance);
    if (rs.empty()) return;
    std::vector<std::vector<int64_t>> added;
    for (size_t i = 0; i < rs.size(); ++i)
      added.push_back(draw_tokens(decode ? 1 : static_cast<int64_t>(below(static_cast<uint64_t>(limits_.chunk_tokens_max) + 1))));
    push_batch(ScheduleOp::kExtend, instance, rs, added, decode ? "decode" : "prefill chunks");
    for (size_t i = 0; i < rs.size(); ++i) {
      std::vector<int64_t>& a = requests_[static_cast<size_t>(rs[i])].accepted;
      a.insert(a.end(), added[i].begin(), added[i].end());
    }
  }

  void verify_and_commit() {
    const int instance = static_cast<int>(below(static_cast<uint64_t>(schedule_.instance_count)));
    const std::vector<int> rs = some_requests(instance);
    if (rs.empty()) return;
    std::vector<std::vector<int64_t>> blocks;  // anchor, then drafts: ragged
    for (size_t i = 0; i < rs.size(); ++i)
      blocks.push_back(draw_tokens(1 + static_cast<int64_t>(below(static_cast<uint64_t>(limits_.draft_tokens_max) + 1))));
    push_batch(ScheduleOp::kVerify, instance, rs, blocks, "verify blocks");
    ScheduleStep c;
    c.op = ScheduleOp::kCommit;
    c.instance = instance;
    c.what = "anchor + accepted drafts";
    for (size_t i = 0; i < rs.size(); ++i) {
      DrawnRequest& q = requests_[static_cast<size_t>(rs[i])];
      const int64_t accepted = static_cast<int64_t>(below(blocks[i].size()));  // 0 .. drafts
      c.commits.push_back(VerifyCommit{q.slot, accepted});
      q.accepted.insert(q.accepted.end(), blocks[i].begin(), blocks[i].begin() + 1 + accepted);
    }
    std::reverse(c.commits.begin(), c.commits.end());  // commit order is free
    schedule_.steps.push_back(std::move(c));
  }

  // Prefill/decode disaggregation: the request leaves its instance and
  // begins on another with the lookback ids handed over.
  void handover() {
    const std::vector<int> rs = active_requests(-1);
    if (rs.empty()) return;
    const int r = rs[below(rs.size())];
    const int to = static_cast<int>(below(static_cast<uint64_t>(schedule_.instance_count)));
    const int slot = free_slot(to);
    if (slot < 0) return;
    DrawnRequest& q = requests_[static_cast<size_t>(r)];
    push_release(q.instance, q.slot, fmt::format("request {} handed over", r));
    unplace(r);
    place(r, to, slot);
    push_begin(to, slot, lookback(q.accepted), fmt::format("request {} from another instance's lookback ids", r));
  }

  // Context-parallel prefill: a chunk cut at random offsets into shards
  // (some may be empty); each CP rank hashes its shard after the halo (the
  // ids before it) on a slot of its own; the request's slot then continues
  // from the chunk's end.
  void cp_prefill() {
    const std::vector<int> rs = active_requests(-1);
    if (rs.empty() || limits_.cp_degree_max < 2) return;
    const int r = rs[below(rs.size())];
    const int degree = 2 + static_cast<int>(below(static_cast<uint64_t>(limits_.cp_degree_max - 1)));
    const std::vector<int64_t> chunk = draw_tokens(1 + static_cast<int64_t>(below(static_cast<uint64_t>(limits_.chunk_tokens_max) * 2)));
    std::vector<size_t> cuts = {0, chunk.size()};
    for (int k = 1; k < degree; ++k) cuts.push_back(below(chunk.size() + 1));
    std::sort(cuts.begin(), cuts.end());
    DrawnRequest& q = requests_[static_cast<size_t>(r)];
    for (int k = 0; k < degree; ++k) {
      const int instance = static_cast<int>(below(static_cast<uint64_t>(schedule_.instance_count)));
      const int slot = free_slot(instance);
      if (slot < 0) return;  // nothing changed yet for this shard; the request keeps its slot
      std::vector<int64_t> before = q.accepted;
      before.insert(before.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(cuts[static_cast<size_t>(k)]));
      const std::vector<int64_t> shard(chunk.begin() + static_cast<std::ptrdiff_t>(cuts[static_cast<size_t>(k)]),
                                       chunk.begin() + static_cast<std::ptrdiff_t>(cuts[static_cast<size_t>(k) + 1]));
      const std::string what = fmt::format("request {} cp shard {} of {}", r, k, degree);
      push_begin(instance, slot, lookback(before), what + " (halo)");
      slot_owner_[static_cast<size_t>(instance)][static_cast<size_t>(slot)] = -2;  // held by the shard
      const int32_t shard_slot = slot;
      ScheduleStep s;
      s.op = ScheduleOp::kExtend;
      s.instance = instance;
      s.what = what;
      s.tokens = shard;
      s.runs.push_back(RequestRun{shard_slot, 0, static_cast<int64_t>(shard.size())});
      s.expected_row_ids = whole_ids(before, shard);
      schedule_.steps.push_back(std::move(s));
      push_release(instance, shard_slot, what);
      slot_owner_[static_cast<size_t>(instance)][static_cast<size_t>(slot)] = -1;
    }
    q.accepted.insert(q.accepted.end(), chunk.begin(), chunk.end());
    const int instance = q.instance;
    const int32_t slot = q.slot;
    push_release(instance, slot, fmt::format("request {} after its cp prefill", r));
    push_begin(instance, slot, lookback(q.accepted), fmt::format("request {} continues after its cp prefill", r));
  }

  // A step with no request in it: padding and idle slots only.
  void padded_step() {
    const int instance = static_cast<int>(below(static_cast<uint64_t>(schedule_.instance_count)));
    push_batch(ScheduleOp::kExtend, instance, {}, {}, "fully padded");
    if (schedule_.steps.back().tokens.empty()) {
      ScheduleStep& s = schedule_.steps.back();
      const size_t heads = static_cast<size_t>(hasher_.head_count());
      for (int k = 0; k < 3; ++k) {
        s.tokens.push_back(draw_garbage());
        s.expected_row_ids.insert(s.expected_row_ids.end(), heads, kDeadId);
      }
      s.runs.push_back(RequestRun{kIdleSlot, 1, 2});
    }
  }

  void finish_request() {
    const std::vector<int> rs = active_requests(-1);
    if (rs.empty()) return;
    const int r = rs[below(rs.size())];
    push_release(requests_[static_cast<size_t>(r)].instance, requests_[static_cast<size_t>(r)].slot,
                 fmt::format("request {} finished", r));
    unplace(r);
    requests_[static_cast<size_t>(r)].finished = true;
  }

  const TableHasher& hasher_;
  ScheduleLimits limits_;
  uint64_t state_;
  RequestSchedule schedule_;
  std::vector<DrawnRequest> requests_;
  std::vector<std::vector<int>> slot_owner_;  // [instance][slot]: request, -1 free
};

}  // namespace

const char* schedule_op_name(ScheduleOp op) {
  switch (op) {
    case ScheduleOp::kBegin: return "begin";
    case ScheduleOp::kExtend: return "extend";
    case ScheduleOp::kVerify: return "verify";
    case ScheduleOp::kCommit: return "commit";
    case ScheduleOp::kRelease: return "release";
  }
  return "?";
}

RequestSchedule draw_request_schedule(const TableHasher& hasher, uint64_t seed, const ScheduleLimits& limits) {
  return ScheduleDrawer(hasher, seed, limits).draw();
}

std::string request_schedule_repro(uint64_t seed) {
  // In a test, the running test (the tests that draw schedules read the
  // variable); elsewhere the schedules' own test (tests/request_schedule_test.cc,
  // in the core layer's test binary).
  const std::string test = rerun_test_line();
  return fmt::format("reproduce: ENGRAMLAB_SCHEDULE_SEED={} {}", seed,
                     test.empty() ? "build/tests/core_tests --gtest_filter=RequestSchedule.EveryCutHashesAsTheAcceptedSequenceWhole" : test);
}

}  // namespace engram::harness
