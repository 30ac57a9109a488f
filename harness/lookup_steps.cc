#include "harness/lookup_steps.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <utility>

#include "core/base/splitmix64.h"

namespace engram::harness {
namespace {

// Request r's id at position p of stream `attempt`: 0 is what is accepted,
// each verify's rejected drafts draw from a stream of their own.
int64_t step_token(uint64_t seed, int request, int64_t position, uint64_t attempt, const TableHasher& h) {
  const uint64_t draw = splitmix64_at(seed ^ 0x5e9d1ce5ull ^ (attempt * 0x9e3779b97f4a7c15ull),
                                      (static_cast<uint64_t>(request) << 32) + static_cast<uint64_t>(position));
  if (draw % 6 == 0) return kDeadId;
  return static_cast<int64_t>((draw >> 8) % static_cast<uint64_t>(h.compressed_vocab_size()));
}

std::vector<int64_t> tail(const std::vector<int64_t>& ids, int n) {
  const size_t keep = std::min(ids.size(), static_cast<size_t>(n));
  return std::vector<int64_t>(ids.end() - static_cast<std::ptrdiff_t>(keep), ids.end());
}

class StepCompiler {
 public:
  StepCompiler(const TableHasher& hasher, int lookback_ids, uint64_t seed)
      : hasher_(hasher), lookback_ids_(lookback_ids), seed_(seed) {}

  CompiledSteps compile(const LookupSteps& steps, const ParallelLayout& layout) {
    out_.slot_count = std::max<int>(1, static_cast<int>(steps.requests.size()));
    out_.instance_count = layout.dp;
    for (size_t r = 0; r < steps.requests.size(); ++r) {
      const StepsRequest& q = steps.requests[r];
      requests_.push_back({q.instance, draw(static_cast<int>(r), 0, q.prefix_tokens, 0)});
      LookupOp op;
      op.step.op = ScheduleOp::kBegin;
      op.step.instance = q.instance;
      op.step.slot = static_cast<int32_t>(r);
      op.step.preceding_ids = requests_.back().accepted;
      op.step.what = fmt::format("request {} {}", r, q.prefix_tokens > 0 ? "from a cached prefix" : "fresh");
      op.what = fmt::format("lookup.requests[{}] (begin)", r);
      out_.ops.push_back(std::move(op));
    }
    for (size_t i = 0; i < steps.steps.size(); ++i) {
      const StepSpec& s = steps.steps[i];
      const std::string what = fmt::format("lookup.steps[{}] ({})", i, step_kind_name(s.kind));
      switch (s.kind) {
        case StepKind::kPrefill: {
          std::vector<std::pair<int, int>> chunks;
          for (size_t r = 0; r < s.chunk_tokens.size(); ++r)
            if (s.chunk_tokens[r] > 0) chunks.push_back({static_cast<int>(r), s.chunk_tokens[r]});
          extend(chunks, what);
          break;
        }
        case StepKind::kDecode: {
          std::vector<std::pair<int, int>> tokens;
          for (int r : s.requests) tokens.push_back({r, 1});
          extend(tokens, what);
          break;
        }
        case StepKind::kVerify: verify(s.verifies, static_cast<uint64_t>(i) + 1, what); break;
        case StepKind::kHandover: handover(s.request, s.to_instance, what); break;
        case StepKind::kCpPrefill:
          if (s.every_split_tokens >= 0) {
            int k = 0;
            for (const std::vector<int>& split : every_split(s.every_split_tokens, layout.prefill_cp))
              cp_prefill(s.request, split, fmt::format("{}, split {} [{}]", what, k++, fmt::join(split, " ")));
          } else {
            cp_prefill(s.request, s.cp_split, what);
          }
          break;
      }
    }
    return std::move(out_);
  }

 private:
  struct Request {
    int instance = 0;
    std::vector<int64_t> accepted;
  };

  std::vector<int64_t> draw(int request, int64_t position, int64_t count, uint64_t attempt) const {
    std::vector<int64_t> ids;
    for (int64_t k = 0; k < count; ++k) ids.push_back(step_token(seed_, request, position + k, attempt, hasher_));
    return ids;
  }

  // One batch per instance holding runs (request order), for the requests given.
  void push_batches(ScheduleOp kind, const std::vector<std::pair<int, std::vector<int64_t>>>& added,
                    const std::string& what) {
    std::map<int, LookupOp> by_instance;
    for (const auto& [r, ids] : added) {
      const Request& q = requests_[static_cast<size_t>(r)];
      LookupOp& op = by_instance[q.instance];
      op.step.op = kind;
      op.step.instance = q.instance;
      op.step.what = what;
      op.what = what;
      op.step.runs.push_back(RequestRun{r, static_cast<int64_t>(op.step.tokens.size()), static_cast<int64_t>(ids.size())});
      op.step.tokens.insert(op.step.tokens.end(), ids.begin(), ids.end());
      op.run_contexts.push_back(q.accepted);
    }
    for (auto& [instance, op] : by_instance) out_.ops.push_back(std::move(op));
  }

  void extend(const std::vector<std::pair<int, int>>& counts, const std::string& what) {
    std::vector<std::pair<int, std::vector<int64_t>>> added;
    for (const auto& [r, n] : counts)
      added.push_back({r, draw(r, static_cast<int64_t>(requests_[static_cast<size_t>(r)].accepted.size()), n, 0)});
    push_batches(ScheduleOp::kExtend, added, what);
    for (const auto& [r, ids] : added) {
      std::vector<int64_t>& a = requests_[static_cast<size_t>(r)].accepted;
      a.insert(a.end(), ids.begin(), ids.end());
    }
  }

  void verify(const std::vector<StepsVerify>& blocks, uint64_t attempt, const std::string& what) {
    std::vector<std::pair<int, std::vector<int64_t>>> added;
    for (const StepsVerify& v : blocks) {
      const int64_t at = static_cast<int64_t>(requests_[static_cast<size_t>(v.request)].accepted.size());
      // The anchor and the accepted drafts are what the request goes on with;
      // the rejected ones are drawn apart.
      std::vector<int64_t> block = draw(v.request, at, 1 + v.accepted, 0);
      const std::vector<int64_t> rejected = draw(v.request, at + 1 + v.accepted, v.drafts - v.accepted, attempt);
      block.insert(block.end(), rejected.begin(), rejected.end());
      added.push_back({v.request, std::move(block)});
    }
    push_batches(ScheduleOp::kVerify, added, what);
    std::map<int, LookupOp> commits;
    for (size_t i = 0; i < blocks.size(); ++i) {
      const StepsVerify& v = blocks[i];
      Request& q = requests_[static_cast<size_t>(v.request)];
      LookupOp& op = commits[q.instance];
      op.step.op = ScheduleOp::kCommit;
      op.step.instance = q.instance;
      op.step.what = op.what = what + " commit";
      op.step.commits.push_back(VerifyCommit{v.request, v.accepted});
      const std::vector<int64_t>& block = added[i].second;
      q.accepted.insert(q.accepted.end(), block.begin(), block.begin() + 1 + v.accepted);
    }
    for (auto& [instance, op] : commits) out_.ops.push_back(std::move(op));
  }

  void handover(int r, int to, const std::string& what) {
    Request& q = requests_[static_cast<size_t>(r)];
    LookupOp release;
    release.step.op = ScheduleOp::kRelease;
    release.step.instance = q.instance;
    release.step.slot = r;
    release.step.what = release.what = what + " release";
    out_.ops.push_back(std::move(release));
    q.instance = to;
    LookupOp begin;
    begin.step.op = ScheduleOp::kBegin;
    begin.step.instance = to;
    begin.step.slot = r;
    begin.step.preceding_ids = tail(q.accepted, lookback_ids_);
    begin.step.what = begin.what = what + " begin from the lookback ids";
    out_.ops.push_back(std::move(begin));
  }

  void cp_prefill(int r, const std::vector<int>& split, const std::string& what) {
    Request& q = requests_[static_cast<size_t>(r)];
    CpPrefillOp cp;
    cp.request = r;
    cp.owner_instance = q.instance;
    cp.slot = r;
    cp.preceding_ids = tail(q.accepted, lookback_ids_);
    int64_t at = static_cast<int64_t>(q.accepted.size());
    for (int n : split) {
      cp.shards.push_back(draw(r, at, n, 0));
      at += n;
    }
    for (const std::vector<int64_t>& shard : cp.shards) q.accepted.insert(q.accepted.end(), shard.begin(), shard.end());
    LookupOp op;
    op.cp = std::move(cp);
    op.what = what;
    out_.ops.push_back(std::move(op));
  }

  const TableHasher& hasher_;
  int lookback_ids_;
  uint64_t seed_;
  std::vector<Request> requests_;
  CompiledSteps out_;
};

// A drawn schedule, with the context each run is hashed after.
CompiledSteps compile_drawn(const TableHasher& hasher, uint64_t seed, const ParallelLayout& layout) {
  ScheduleLimits limits;
  limits.instance_count_max = std::max(1, std::min(layout.dp, 4));
  limits.steps_max = 16;
  RequestSchedule schedule = draw_request_schedule(hasher, seed, limits);
  CompiledSteps out;
  out.instance_count = schedule.instance_count;
  out.slot_count = schedule.slot_count;
  std::map<std::pair<int, int32_t>, std::vector<int64_t>> context, pending;
  for (size_t i = 0; i < schedule.steps.size(); ++i) {
    LookupOp op;
    op.step = std::move(schedule.steps[i]);
    op.what = fmt::format("drawn step {} ({} {})", i, schedule_op_name(op.step.op), op.step.what);
    const ScheduleStep& s = op.step;
    switch (s.op) {
      case ScheduleOp::kBegin: context[{s.instance, s.slot}] = s.preceding_ids; break;
      case ScheduleOp::kRelease: context.erase({s.instance, s.slot}); pending.erase({s.instance, s.slot}); break;
      case ScheduleOp::kCommit:
        for (const VerifyCommit& c : s.commits) {
          const std::vector<int64_t>& block = pending[{s.instance, c.slot}];
          std::vector<int64_t>& ids = context[{s.instance, c.slot}];
          ids.insert(ids.end(), block.begin(), block.begin() + 1 + c.accepted_drafts);
        }
        break;
      case ScheduleOp::kExtend:
      case ScheduleOp::kVerify:
        for (const RequestRun& run : s.runs) {
          const auto first = s.tokens.begin() + run.token_begin;
          const std::vector<int64_t> ids(first, first + run.token_count);
          if (run.slot == kIdleSlot) {
            op.run_contexts.emplace_back();
            continue;
          }
          std::vector<int64_t>& before = context[{s.instance, run.slot}];
          op.run_contexts.push_back(before);
          if (s.op == ScheduleOp::kExtend) before.insert(before.end(), ids.begin(), ids.end());
          else pending[{s.instance, run.slot}] = ids;
        }
        break;
    }
    out.ops.push_back(std::move(op));
  }
  return out;
}

}  // namespace

const char* step_kind_name(StepKind kind) {
  switch (kind) {
    case StepKind::kPrefill: return "prefill";
    case StepKind::kDecode: return "decode";
    case StepKind::kVerify: return "verify";
    case StepKind::kHandover: return "handover";
    case StepKind::kCpPrefill: return "cp_prefill";
  }
  return "?";
}

int64_t every_split_count(int tokens, int parts) {
  ENGRAM_CHECK(tokens >= 0 && parts >= 1);
  // C(tokens + parts - 1, parts - 1), one factor at a time (exact at each step).
  int64_t count = 1;
  for (int k = 1; k < parts; ++k) {
    count = count * (tokens + k) / k;
    if (count > kMaxEverySplits) return kMaxEverySplits + 1;
  }
  return count;
}

std::vector<std::vector<int>> every_split(int tokens, int parts) {
  ENGRAM_CHECK(every_split_count(tokens, parts) <= kMaxEverySplits);
  std::vector<std::vector<int>> out;
  std::vector<int> cuts(static_cast<size_t>(parts) + 1, 0);
  cuts.back() = tokens;
  std::function<void(size_t)> next = [&](size_t i) {
    if (i == static_cast<size_t>(parts)) {
      std::vector<int> split;
      for (size_t k = 0; k < static_cast<size_t>(parts); ++k) split.push_back(cuts[k + 1] - cuts[k]);
      out.push_back(std::move(split));
      return;
    }
    for (int c = cuts[i - 1]; c <= tokens; ++c) {
      cuts[i] = c;
      next(i + 1);
    }
  };
  next(1);
  return out;
}

int64_t LookupOp::slot_tokens() const {
  if (cp) {
    int64_t most = 0;
    for (const auto& shard : cp->shards) most = std::max<int64_t>(most, static_cast<int64_t>(shard.size()));
    return most;
  }
  return static_cast<int64_t>(step.tokens.size());
}

CompiledSteps compile_lookup_steps(const LookupSteps& steps, const TableHasher& hasher, int lookback_ids,
                                   uint64_t seed, const ParallelLayout& layout) {
  if (steps.drawn) return compile_drawn(hasher, seed, layout);
  return StepCompiler(hasher, lookback_ids, seed).compile(steps, layout);
}

}  // namespace engram::harness
