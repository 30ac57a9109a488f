// One rank's checked lookups in a scenario (harness/scenario_rank.h), shared
// by its batches and its steps: a lookup of its ids through the runtime
// (and, where the rank's device can read a host table, through the device
// too), checked against the reference lookup and hashed; and its ids, where
// they were hashed across steps or CP ranks, checked against the accepted
// sequence hashed whole. The first difference of each kind is kept in the
// result; a failed lookup is returned.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/backend/step_clock.h"
#include "core/runtime/engram_runtime.h"
#include "harness/scenario_rank.h"

namespace engram::harness {

class RankLookups {
 public:
  // `clock`: the emulator's step clock (null on real processes): each
  // lookup through the runtime is one step of it.
  RankLookups(EngramRuntime& runtime, const ScenarioRankInputs& inputs, int world_rank, ScenarioRankResult& out,
              StepClock* clock = nullptr);

  // ids: [tokens][heads] of table `table`; slot: the DP slot every rank of
  // the step passes (at least 1). With sequence parallelism the output is
  // this TP rank's token shard, checked against that shard of the reference.
  Status lookup(int table, std::span<const int64_t> ids, int64_t slot, std::string_view label);

  // `ids` of `tokens` hashed after `context` (the ids before them, oldest
  // first) against (context + tokens) hashed whole by table `table`.
  void check_ids(int table, std::span<const int64_t> context, std::span<const int64_t> tokens,
                 std::span<const int64_t> ids, std::string_view label);

 private:
  EngramRuntime& runtime_;
  const ScenarioRankInputs& inputs_;
  ScenarioRankResult& out_;
  StepClock* clock_ = nullptr;
  int tp_rank_ = 0;
  bool sequence_parallel_ = false;
};

}  // namespace engram::harness
