// A scenario's lookup in steps (docs/design.md section 10): requests on DP
// replicas (engine instances) and the steps engines take with them, each
// step's ids hashed by a request hasher per rank and looked up through the
// runtime. The data a scenario file writes (lookup.requests, lookup.steps),
// and that data compiled into operations per instance with the context each
// run is hashed after, so a rank can check its ids against the accepted
// sequence hashed whole:
//
//   lookup:
//     requests: [{instance: 0}, {instance: 1, prefix: 5}]   # a prefix hit: 5 cached ids
//     steps:
//       - prefill: [6, 3]                          # a chunk per request (0: none this step)
//       - decode: [0, 1]                           # one token each
//       - verify: [{request: 0, drafts: 3, accepted: 1}]   # anchor + drafts; commit anchor + accepted
//       - handover: {request: 0, to: 1}            # released, begun on replica 1 from its lookback ids
//       - cp_prefill: {request: 1, split: [2, 0, 3, 1]}    # a chunk over the request's CP group
//       - cp_prefill: {request: 0, tokens: 4, split: every} # every split of 4 tokens, a chunk each
//   # or `steps: drawn`: a schedule drawn from the seed (harness/request_schedule.h)
//
// Token ids come from the seed: request r's accepted id at position p is
// the same whatever step brings it; a rejected draft is drawn apart, so it
// must leave no trace. About one id in six is DEAD (an image token).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/deployment/deployment.h"
#include "core/model/hashing.h"
#include "harness/request_schedule.h"

namespace engram::harness {

struct StepsRequest {
  int instance = 0;       // the DP replica it begins on
  int prefix_tokens = 0;  // cached ids before its first step (a prefix hit)
};

struct StepsVerify {
  int request = 0;
  int drafts = 0;    // draft tokens after the anchor
  int accepted = 0;  // 0..drafts
};

enum class StepKind : uint8_t { kPrefill, kDecode, kVerify, kHandover, kCpPrefill };
const char* step_kind_name(StepKind kind);  // the YAML key: "prefill", ...

struct StepSpec {
  StepKind kind = StepKind::kPrefill;
  std::vector<int> chunk_tokens;      // prefill: one count per request
  std::vector<int> requests;          // decode
  std::vector<StepsVerify> verifies;  // verify
  int request = 0;                    // handover, cp_prefill
  int to_instance = 0;                // handover
  std::vector<int> cp_split;          // cp_prefill: shard lengths by CP rank
  int every_split_tokens = -1;        // cp_prefill `split: every` of this many tokens; -1: cp_split
};

struct LookupSteps {
  std::vector<StepsRequest> requests{};
  std::vector<StepSpec> steps{};
  bool drawn = false;  // `steps: drawn`
  bool any() const { return drawn || !steps.empty(); }
};

// Every way to cut `tokens` into `parts` shards (C(tokens + parts - 1,
// parts - 1) of them), in lexicographic order of their cuts.
std::vector<std::vector<int>> every_split(int tokens, int parts);

// The largest count of splits one `split: every` step may expand to.
inline constexpr int64_t kMaxEverySplits = 2000;
// C(tokens + parts - 1, parts - 1), saturating past kMaxEverySplits.
int64_t every_split_count(int tokens, int parts);

// A CP prefill chunk: shard k goes to CP rank k of the request's CP group
// (core/deployment/cp_groups.h); every member knows the request's ids before
// the chunk, as SGLang's CP ranks share a batch.
struct CpPrefillOp {
  int request = 0;
  int owner_instance = 0;  // where the request lives: it goes on after the chunk
  int32_t slot = 0;
  std::vector<int64_t> preceding_ids;        // a lookback window of the ids before the chunk
  std::vector<std::vector<int64_t>> shards;  // by CP rank
};

// One operation: a request-hasher step on one instance, or a CP prefill.
struct LookupOp {
  ScheduleStep step;                       // when !cp
  std::vector<std::vector<int64_t>> run_contexts;  // kExtend / kVerify: per run, the accepted ids before it
  std::optional<CpPrefillOp> cp;
  std::string what;  // "lookup.steps[3] (verify)", "drawn step 7 (decode)"
  // Tokens looked up by the busiest rank (the DP slot every rank passes).
  int64_t slot_tokens() const;
};

struct CompiledSteps {
  int instance_count = 1;
  int slot_count = 1;
  std::vector<LookupOp> ops;
};

// `hasher`: the lookup model's first table (its vocabulary and DEAD rule
// draw the ids); lookback_ids: how many ids a handover and a CP prefill
// carry (the longest n-gram of any table, less one, plus one). The steps
// were checked against the layout when the scenario was read.
CompiledSteps compile_lookup_steps(const LookupSteps& steps, const TableHasher& hasher, int lookback_ids,
                                   uint64_t seed, const ParallelLayout& layout);

}  // namespace engram::harness
