// A scenario's lookup in steps (harness/lookup_steps.h): every step kind
// read, bad fields refused with the line, the column, the field and the
// fix, and the steps compiled into hasher operations whose contexts are the
// accepted sequences (every split of a CP chunk, rejected drafts apart,
// handovers from the lookback ids, drawn schedules).
#include "harness/lookup_steps.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>

#include "core/model/table_spec.h"
#include "harness/scenario.h"

namespace engram::harness {
namespace {

constexpr const char* kSteps = R"(hosts: [{name: a, gpus: 4}]
layout: {tp: 1, dp: 4, prefill_cp: 2}
lookup:
  requests: [{instance: 0}, {instance: 3, prefix: 5}]
  steps:
    - prefill: [4, 0]
    - decode: [1, 0]
    - verify: [{request: 0, drafts: 3, accepted: 1}, {request: 1, drafts: 0, accepted: 0}]
    - handover: {request: 0, to: 1}
    - cp_prefill: {request: 1, split: [2, 3]}
    - cp_prefill: {request: 0, tokens: 3, split: every}
expect: {ids_equal_whole: true}
)";

TEST(LookupSteps, ReadsEveryStepKind) {
  auto s = parse_scenario_text(kSteps, "steps.yaml");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  const LookupSteps& l = s->lookup.steps;
  ASSERT_EQ(l.requests.size(), 2u);
  EXPECT_EQ(l.requests[1].instance, 3);
  EXPECT_EQ(l.requests[1].prefix_tokens, 5);
  ASSERT_EQ(l.steps.size(), 6u);
  EXPECT_EQ(l.steps[0].chunk_tokens, (std::vector<int>{4, 0}));
  EXPECT_EQ(l.steps[1].requests, (std::vector<int>{1, 0}));
  ASSERT_EQ(l.steps[2].verifies.size(), 2u);
  EXPECT_EQ(l.steps[2].verifies[0].drafts, 3);
  EXPECT_EQ(l.steps[2].verifies[0].accepted, 1);
  EXPECT_EQ(l.steps[3].kind, StepKind::kHandover);
  EXPECT_EQ(l.steps[3].to_instance, 1);
  EXPECT_EQ(l.steps[4].cp_split, (std::vector<int>{2, 3}));
  EXPECT_EQ(l.steps[5].every_split_tokens, 3);
  EXPECT_TRUE(s->expect.ids_equal_whole);
  auto drawn = parse_scenario_text("hosts: [{name: a, gpus: 2}]\nlayout: {dp: 2}\nlookup: {steps: drawn}\nexpect: {}\n",
                                   "drawn.yaml");
  ASSERT_TRUE(drawn.is_ok()) << drawn.status().to_string();
  EXPECT_TRUE(drawn->lookup.steps.drawn);
}

const TableHasher& tiny_hasher() {
  static const TableHasher h = [] {
    auto spec = model_preset("tiny");
    ENGRAM_CHECK(spec.is_ok());
    auto hasher = TableHasher::create(*spec, 0);
    ENGRAM_CHECK(hasher.is_ok());
    return *hasher;
  }();
  return h;
}

TEST(LookupSteps, CompilesIntoOperationsAfterTheAcceptedSequence) {
  auto s = parse_scenario_text(kSteps, "steps.yaml");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  const TableHasher& h = tiny_hasher();
  const int lookback = h.history_length() + 1;
  const CompiledSteps c = compile_lookup_steps(s->lookup.steps, h, lookback, 7, s->deployment.layout);
  EXPECT_EQ(c.slot_count, 2);
  // 2 begins; prefill (1 instance); decode (2 instances); verify (2) + commits (2);
  // handover (release + begin); one CP chunk; every split of 3 over 2 CP ranks (4).
  ASSERT_EQ(c.ops.size(), 2u + 1 + 2 + 4 + 2 + 1 + 4);
  EXPECT_EQ(c.ops[1].step.preceding_ids.size(), 5u);  // request 1's prefix
  // Decode of request 0 runs after its 4 prefill ids.
  const LookupOp& decode0 = c.ops[3];
  ASSERT_EQ(decode0.step.op, ScheduleOp::kExtend);
  EXPECT_EQ(decode0.step.instance, 0);
  EXPECT_EQ(decode0.run_contexts[0], c.ops[2].step.tokens);
  // Verify of request 0: anchor + 3 drafts; the commit keeps anchor + 1.
  const LookupOp& verify0 = c.ops[5];
  ASSERT_EQ(verify0.step.op, ScheduleOp::kVerify);
  ASSERT_EQ(verify0.step.tokens.size(), 4u);
  const LookupOp& begin1 = c.ops[10];
  ASSERT_EQ(begin1.step.op, ScheduleOp::kBegin);
  EXPECT_EQ(begin1.step.instance, 1);
  std::vector<int64_t> accepted = c.ops[2].step.tokens;
  accepted.push_back(decode0.step.tokens[0]);
  accepted.insert(accepted.end(), verify0.step.tokens.begin(), verify0.step.tokens.begin() + 2);
  // The handover carries the lookback window of what was accepted, not the rejected drafts.
  EXPECT_EQ(begin1.step.preceding_ids,
            std::vector<int64_t>(accepted.end() - lookback, accepted.end()));
  // The CP chunk of request 1: two shards, after its prefix, decode and anchor.
  const LookupOp& cp = c.ops[11];
  ASSERT_TRUE(cp.cp.has_value());
  EXPECT_EQ(cp.cp->owner_instance, 3);
  EXPECT_EQ(cp.cp->shards[0].size(), 2u);
  EXPECT_EQ(cp.cp->shards[1].size(), 3u);
  EXPECT_EQ(cp.slot_tokens(), 3);
  // Every split of 3 tokens over 2 CP ranks: 0|3, 1|2, 2|1, 3|0.
  for (int k = 0; k < 4; ++k) {
    ASSERT_TRUE(c.ops[12 + static_cast<size_t>(k)].cp.has_value());
    EXPECT_EQ(c.ops[12 + static_cast<size_t>(k)].cp->shards[0].size(), static_cast<size_t>(k));
    EXPECT_EQ(c.ops[12 + static_cast<size_t>(k)].cp->owner_instance, 1);  // after its handover
  }
  // Every token in the vocabulary or DEAD, some DEAD.
  int dead = 0;
  for (const LookupOp& op : c.ops)
    for (int64_t t : op.step.tokens) {
      EXPECT_TRUE(t == kDeadId || (t >= 0 && t < h.compressed_vocab_size())) << t;
      dead += t == kDeadId;
    }
  EXPECT_GT(dead, 0);
}

TEST(LookupSteps, EverySplitCountsAndListsEachCutOnce) {
  EXPECT_EQ(every_split_count(5, 4), 56);
  EXPECT_EQ(every_split_count(0, 4), 1);
  EXPECT_EQ(every_split_count(9, 1), 1);
  EXPECT_GT(every_split_count(4096, 4), kMaxEverySplits);
  const auto splits = every_split(5, 4);
  ASSERT_EQ(splits.size(), 56u);
  for (const auto& s : splits) {
    EXPECT_EQ(s.size(), 4u);
    int sum = 0;
    for (int n : s) sum += n;
    EXPECT_EQ(sum, 5);
  }
  EXPECT_EQ(std::set<std::vector<int>>(splits.begin(), splits.end()).size(), 56u);
}

TEST(LookupSteps, ADrawnScheduleCompilesWithItsRunsContexts) {
  const ParallelLayout layout{.tp = 1, .dp = 3};
  int runs = 0;
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    const CompiledSteps c = compile_lookup_steps(LookupSteps{.drawn = true}, tiny_hasher(), 4, seed, layout);
    EXPECT_LE(c.instance_count, 3);
    for (const LookupOp& op : c.ops) {
      EXPECT_FALSE(op.cp.has_value());
      if (op.step.op == ScheduleOp::kExtend || op.step.op == ScheduleOp::kVerify) {
        ASSERT_EQ(op.run_contexts.size(), op.step.runs.size());
        runs += static_cast<int>(op.step.runs.size());
      }
    }
  }
  EXPECT_GT(runs, 50);
}

struct BadCase {
  const char* name;
  std::string lookup;  // the lookup section's lines after "lookup:\n"
  const char* position;
  std::vector<const char*> words;
  std::string layout = "{tp: 1, dp: 2}";
  std::string expect = "{}";
};

TEST(LookupSteps, BadFieldsNameLineColumnFieldAndFix) {
  const std::string two = "  requests: [{instance: 0}, {instance: 1}]\n";
  const BadCase cases[] = {
      {"unknown step kind", two + "  steps: [{decod: [0]}]\n", "line 5, column 12",
       {"lookup.steps[0].decod", "unknown field 'decod'", "decode"}},
      {"two kinds in one step", two + "  steps: [{decode: [0], prefill: [1, 1]}]\n", "line 5, column 11",
       {"lookup.steps[0]", "a map of 2 keys", "{decode: [0, 1]}"}},
      {"prefill of the wrong length", two + "  steps: [{prefill: [3]}]\n", "line 5, column 21",
       {"lookup.steps[0].prefill", "1 chunk lengths for 2 requests", "0: none this step"}},
      {"a request that does not exist", two + "  steps: [{decode: [5]}]\n", "line 5, column 21",
       {"lookup.steps[0].decode[0]", "request 5 does not exist: lookup.requests lists 2 requests, numbered from 0 (0 to 1)"}},
      {"a request beyond the one there is", "  requests: [{instance: 0}]\n  steps: [{decode: [1]}]\n",
       "line 5, column 21", {"lookup.steps[0].decode[0]", "request 1 does not exist", "lists 1 request, numbered from 0 (write 0)"}},
      {"a request listed twice", two + "  steps: [{decode: [0, 0]}]\n", "line 5, column 20",
       {"lookup.steps[0].decode", "request 0 is listed twice"}},
      {"more accepted than drafts", two + "  steps: [{verify: [{request: 0, drafts: 2, accepted: 3}]}]\n",
       "line 5, column 55", {"lookup.steps[0].verify[0].accepted", "3 accepted of 2 drafts; accept 0..2"}},
      {"a verify without drafts", two + "  steps: [{verify: [{request: 0, accepted: 0}]}]\n", "line 5, column 21",
       {"lookup.steps[0].verify[0].drafts", "missing", "drafts: 3"}},
      {"a handover to its own replica", two + "  steps: [{handover: {request: 1, to: 1}}]\n", "line 5, column 39",
       {"lookup.steps[0].handover.to", "request 1 is on replica 1 already"}},
      {"a handover to no replica", two + "  steps: [{handover: {request: 1, to: 5}}]\n", "line 5, column 39",
       {"lookup.steps[0].handover.to", "replica 5 does not exist; replicas are 0..1"}},
      {"a CP prefill without a CP group", two + "  steps: [{cp_prefill: {request: 0, split: [1]}}]\n",
       "line 5, column 24", {"lookup.steps[0].cp_prefill", "layout.prefill_cp is 1", "divisor of layout.dp"}},
      {"a split of the wrong length", two + "  steps: [{cp_prefill: {request: 0, split: [1, 2, 3]}}]\n",
       "line 5, column 44", {"lookup.steps[0].cp_prefill.split", "3 shard lengths for 2 CP ranks"},
       "{tp: 1, dp: 2, prefill_cp: 2}"},
      {"split every without tokens", two + "  steps: [{cp_prefill: {request: 0, split: every}}]\n",
       "line 5, column 24", {"lookup.steps[0].cp_prefill.tokens", "missing", "tokens: 6"},
       "{tp: 1, dp: 2, prefill_cp: 2}"},
      {"split every with too many splits", two + "  steps: [{cp_prefill: {request: 0, tokens: 4000, split: every}}]\n",
       "line 5, column 45", {"lookup.steps[0].cp_prefill.tokens", "more than 2000 splits"},
       "{tp: 1, dp: 4, prefill_cp: 4}"},
      {"a step over the DP slot", two + "  steps: [{prefill: [1100, 0]}]\n", "line 5, column 21",
       {"lookup.steps[0].prefill", "1100 tokens on replica 0", "config.tokens_per_rank_max = 1024"}},
      {"steps beside tokens", "  tokens: 4\n" + two + "  steps: [{decode: [0]}]\n", "line 4, column 11",
       {"lookup.tokens", "replaces tokens and batches"}},
      {"steps without requests", "  steps: [{decode: [0]}]\n", "line 4, column 3", {"lookup.requests", "missing"}},
      {"a request on no replica", "  requests: [{instance: 3}]\n  steps: [{decode: [0]}]\n", "line 4, column 25",
       {"lookup.requests[0].instance", "replica 3 does not exist"}},
      {"drawn steps beside requests", two + "  steps: drawn\n", "line 4, column 13",
       {"lookup.requests", "with steps: drawn"}},
      {"ids_equal_whole with nothing across steps", "  tokens: 4\n", "line 5, column 27",
       {"expect.ids_equal_whole", "nothing is hashed across steps or CP ranks"}, "{tp: 1, dp: 2}",
       "{ids_equal_whole: true}"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string yaml = fmt::format("hosts: [{{name: a, gpus: 4}}]\nlayout: {}\nlookup:\n{}expect: {}\n",
                                         c.layout, c.lookup, c.expect);
    auto s = parse_scenario_text(yaml, "bad.yaml");
    ASSERT_FALSE(s.is_ok()) << yaml;
    const std::string& m = s.status().message();
    EXPECT_EQ(s.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(m.find(std::string("bad.yaml: ") + c.position), std::string::npos) << m;
    for (const char* w : c.words) EXPECT_NE(m.find(w), std::string::npos) << "'" << w << "' missing in: " << m;
  }
}

}  // namespace
}  // namespace engram::harness
