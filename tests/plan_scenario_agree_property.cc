// One truth over drawn deployments: every deployment `plan` refuses (its
// plan_deployment, then the memory fit, as apps/plan_command.cc runs them),
// the scenario run refuses with the same error, kind and words, on the
// emulated ranks' own decision; and one `plan` lets run is not refused there
// for memory. The deployments are the swarm's draws (harness/swarm.h), with
// the host's RAM, memory limits and a tmpfs sizeLimit drawn on top so every
// part of the fit is met; no faults, no lookups (the decision is the point).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "core/base/units.h"
#include "core/plan/deployment_plan.h"
#include "core/plan/memory_fit.h"
#include "harness/swarm.h"

namespace engram {
namespace {

// Sizes that fall on both sides of V4.1's tables (188.8 GiB; a TP slice of
// 47.2 GiB at tp 4).
rc::Gen<uint64_t> gen_gib(std::vector<uint64_t> gib) {
  return rc::gen::map(rc::gen::elementOf(gib), [](uint64_t g) { return g * kGiB; });
}

void draw_limits(Deployment& d) {
  for (HostSpec& h : d.hosts) {
    if (*rc::gen::inRange(0, 3) == 0) h.host_memory_bytes = *gen_gib({64, 256, 1024, 4096});
    if (*rc::gen::inRange(0, 3) == 0) h.memory_limit_bytes_per_rank = *gen_gib({1, 16, 64, 256, 1024});
    if (h.shm_mounted && *rc::gen::inRange(0, 4) == 0) h.tmpfs_bytes_enforced = *gen_gib({1, 100, 200, 1024});
  }
}

RC_GTEST_PROP(PlanScenarioAgree, EveryRefusalOfPlanIsTheScenarioRunsWithTheSameText, ()) {
  const uint64_t seed = *rc::gen::inRange<uint64_t>(1, 1u << 30);
  harness::SwarmCase c = harness::draw_swarm_case(seed);
  draw_limits(c.job.deployment);
  c.job.faults = {};
  c.job.lookup.run = false;

  WarningSink sink;
  const Result<PlanResult> plan = plan_deployment(c.job.deployment, sink);
  const Status refused = plan.is_ok() ? check_memory_fits(plan.value()) : plan.status();
  const harness::EmulatedOutcome out = harness::run_emulated_job(c.job);
  RC_PRE(!out.emulator_refused || refused.code() == ErrorCode::kInvalidArgument);
  RC_TAG(refused.is_ok() ? std::string("plan lets it run") : "plan refuses: " + std::string(error_code_name(refused.code())));

  if (!refused.is_ok()) {
    RC_ASSERT(out.error.has_value());
    if (out.error->code() != refused.code() || out.error->message() != refused.message())
      RC_FAIL("seed " + std::to_string(seed) + ": plan refused with\n  " + refused.to_string() +
              "\nbut the scenario run with\n  " + out.error->to_string());
    return;
  }
  // Nothing refused it for memory where plan let it run (no faults: an
  // error at the decision can only be the ranks' own verdict).
  if (out.error && out.error->context().step == "decide placement")
    RC_FAIL("seed " + std::to_string(seed) + ": plan let it run, the scenario's ranks refused it: " +
            out.error->to_string());
}

}  // namespace
}  // namespace engram
