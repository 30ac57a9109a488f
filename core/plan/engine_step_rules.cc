#include "core/plan/engine_step_rules.h"

namespace engram {

EngineStepRules engine_step_rules(EngineId engine, const Deployment& deployment) {
  EngineStepRules r;
  switch (engine) {
    case EngineId::kEngramlab:
      // Its runtime: reduce-scatter of the row shards
      // (core/placements/device_collective.cc), an all-to-all of head rows
      // (core/placements/host_head_sharded.cc), buffers of the step's tokens,
      // no side stream (docs/perf_notes.md lines 377-397: a side-stream
      // prefetch is measured, not built into the runtime).
      r.source = "engramlab's runtime: row shards summed back by reduce-scatter, head rows by all-to-all, no side stream";
      break;
    case EngineId::kVllm:
      // Head rows come back by an all-gather over the Engram DP group, each
      // rank keeping its own tokens (_gather_engram_rows; docs/design.md
      // section 9). No side-stream prefetch read from its code: not counted.
      r.head_shards_back = CollectiveKind::kAllGather;
      r.source = "vLLM: _gather_engram_rows all-gathers head rows over the Engram DP group (docs/design.md section 9)";
      break;
    case EngineId::kSglang:
      // Row shards: zero-fill + all-reduce over the TP group; with DP
      // attention, ids all-gathered over DP, reduce-scatter back, every DP
      // rank's slot padded to the largest (idle DP slots are DEAD ids,
      // docs/design.md sections 1 and 9).
      if (deployment.layout.dp > 1) {
        r.row_shards_back = CollectiveKind::kReduceScatter;
        r.pads_to_slot = true;
        r.source = "SGLang with DP attention: all-gather ids, reduce-scatter rows, DP slots padded (docs/design.md "
                   "section 9)";
      } else {
        r.row_shards_back = CollectiveKind::kAllReduce;
        r.source = "SGLang: zero-fill + all-reduce over the TP group (docs/design.md section 9)";
      }
      break;
  }
  return r;
}

}  // namespace engram
