#include "harness/scenario_rank_steps.h"

#include <fmt/format.h>

#include "core/lookup/cp_halo.h"
#include "core/model/request_hasher.h"

namespace engram::harness {
namespace {

class StepRunner {
 public:
  StepRunner(const CompiledSteps& steps, const ScenarioRankInputs& inputs, int world_rank, Collectives* cp_group,
             const CpGroup& cp, RankLookups& lookups)
      : steps_(steps), inputs_(inputs), world_rank_(world_rank), cp_group_(cp_group), cp_(cp), lookups_(lookups) {
    replica_ = world_rank / inputs.options.layout.tp;
  }

  Status run() {
    for (const TableHasher& h : *inputs_.hashers) {
      ENGRAM_ASSIGN_OR_RETURN(RequestHasher hasher, RequestHasher::create(h, steps_.slot_count));
      hashers_.push_back(std::move(hasher));
    }
    for (const LookupOp& op : steps_.ops) ENGRAM_RETURN_IF_ERROR(op.cp ? cp_prefill(op) : hasher_step(op));
    return Status::ok();
  }

 private:
  // A step the schedule holds valid, refused: the hasher's fault, named.
  Status refused(const LookupOp& op, Status status) const {
    if (status.is_ok()) return status;
    return Status(ErrorCode::kInternal,
                  fmt::format("{}: the request hasher refused a step the schedule holds valid: {}", op.what,
                              status.to_string()),
                  {world_rank_, -1, "hash"});
  }

  Status hasher_step(const LookupOp& op) {
    const ScheduleStep& s = op.step;
    const bool mine = s.instance == replica_;
    if (s.op == ScheduleOp::kExtend || s.op == ScheduleOp::kVerify) return batch(op, mine);
    if (!mine) return Status::ok();
    for (RequestHasher& h : hashers_) {
      switch (s.op) {
        case ScheduleOp::kBegin: ENGRAM_RETURN_IF_ERROR(refused(op, h.begin(s.slot, s.preceding_ids))); break;
        case ScheduleOp::kRelease: ENGRAM_RETURN_IF_ERROR(refused(op, h.release(s.slot))); break;
        case ScheduleOp::kCommit: ENGRAM_RETURN_IF_ERROR(refused(op, h.commit(s.commits))); break;
        case ScheduleOp::kExtend:
        case ScheduleOp::kVerify: break;
      }
    }
    return Status::ok();
  }

  // An extend or a verify on one instance: hashed there, checked run by
  // run; a lookup round everywhere.
  Status batch(const LookupOp& op, bool mine) {
    const ScheduleStep& s = op.step;
    for (size_t t = 0; t < hashers_.size(); ++t) {
      RequestHasher& h = hashers_[t];
      const size_t heads = static_cast<size_t>(h.table_hasher().head_count());
      std::vector<int64_t> ids;
      if (mine) {
        ids.assign(s.tokens.size() * heads, 0);
        ENGRAM_RETURN_IF_ERROR(refused(op, s.op == ScheduleOp::kExtend ? h.extend(s.tokens, s.runs, ids)
                                                                       : h.verify(s.tokens, s.runs, ids)));
        for (size_t k = 0; k < s.runs.size(); ++k) {
          const RequestRun& run = s.runs[k];
          if (run.slot == kIdleSlot || run.token_count == 0) continue;
          const auto first = static_cast<size_t>(run.token_begin);
          const auto count = static_cast<size_t>(run.token_count);
          lookups_.check_ids(static_cast<int>(t), op.run_contexts[k], std::span(s.tokens).subspan(first, count),
                             std::span(ids).subspan(first * heads, count * heads), op.what);
        }
      }
      ENGRAM_RETURN_IF_ERROR(lookups_.lookup(static_cast<int>(t), ids, op.slot_tokens(), op.what));
    }
    return Status::ok();
  }

  // A chunk over the request's CP group: each member hashes its shard after
  // the halos; the request's own replica goes on from the chunk's end.
  Status cp_prefill(const LookupOp& op) {
    const CpPrefillOp& c = *op.cp;
    const int group_size = static_cast<int>(c.shards.size());
    const bool in_group = replica_ / group_size == c.owner_instance / group_size;
    if (!in_group) {
      for (size_t t = 0; t < hashers_.size(); ++t)
        ENGRAM_RETURN_IF_ERROR(lookups_.lookup(static_cast<int>(t), {}, op.slot_tokens(), op.what));
      return Status::ok();
    }
    ENGRAM_CHECK(cp_group_ != nullptr && cp_.cp_rank == replica_ % group_size);
    const std::vector<int64_t>& shard = c.shards[static_cast<size_t>(cp_.cp_rank)];
    ENGRAM_ASSIGN_OR_RETURN(CpHalo halo, exchange_cp_halo(*cp_group_, cp_.world_ranks,
                                                          cp_halo_length(*inputs_.hashers), shard));
    std::vector<int64_t> context = c.preceding_ids;  // what the check hashes whole before the shard
    for (int k = 0; k < cp_.cp_rank; ++k) context.insert(context.end(), c.shards[static_cast<size_t>(k)].begin(),
                                                         c.shards[static_cast<size_t>(k)].end());
    for (size_t t = 0; t < hashers_.size(); ++t) {
      const TableHasher& hasher = hashers_[t].table_hasher();
      std::vector<int64_t> ids(shard.size() * static_cast<size_t>(hasher.head_count()));
      ENGRAM_RETURN_IF_ERROR(hash_cp_shard(halo, cp_.cp_rank, hasher, c.preceding_ids, shard, ids));
      lookups_.check_ids(static_cast<int>(t), context, shard, ids, op.what);
      ENGRAM_RETURN_IF_ERROR(lookups_.lookup(static_cast<int>(t), ids, op.slot_tokens(), op.what));
    }
    if (replica_ == c.owner_instance) {
      const std::vector<int64_t> after = halo.lookback_after_chunk(c.preceding_ids);
      for (RequestHasher& h : hashers_) {
        ENGRAM_RETURN_IF_ERROR(refused(op, h.release(c.slot)));
        ENGRAM_RETURN_IF_ERROR(refused(op, h.begin(c.slot, after)));
      }
    }
    return Status::ok();
  }

  const CompiledSteps& steps_;
  const ScenarioRankInputs& inputs_;
  int world_rank_;
  Collectives* cp_group_;
  const CpGroup& cp_;
  RankLookups& lookups_;
  int replica_ = 0;
  std::vector<RequestHasher> hashers_;
};

}  // namespace

Status run_lookup_steps(const CompiledSteps& steps, const ScenarioRankInputs& inputs, int world_rank,
                        Collectives* cp_group, const CpGroup& cp, RankLookups& lookups) {
  return StepRunner(steps, inputs, world_rank, cp_group, cp, lookups).run();
}

}  // namespace engram::harness
