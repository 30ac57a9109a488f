// The runtime's plan from the gathered facts (core/runtime/shared_plan.h) on
// the emulator: the ranks of one world plan once and share the plan, which
// is kept with their facts, not in the process: it is freed with the world,
// two worlds with different facts get their own plans, and a rank that
// passes other inputs gets a plan of its own.
#include "core/runtime/shared_plan.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime/engram_runtime.h"
#include "sim/world.h"
#include "tests/deployment_fixtures.h"

namespace engram {
namespace {

HostSpec host(std::string name, int gpus) { return testing::host(std::move(name), gpus, "GB200"); }

struct Planned {
  std::vector<const SharedPlan*> identity;           // per rank
  std::vector<std::weak_ptr<const SharedPlan>> kept;  // per rank
  std::shared_ptr<const SharedPlan> rank0;            // held past the world's end
};

// Every rank gathers and decides; `options_of` gives each rank its options.
Planned plan_on(std::vector<HostSpec> hosts, uint64_t seed,
                const std::function<RuntimeOptions(int rank)>& options_of) {
  sim::WorldSpec spec;
  spec.hosts = std::move(hosts);
  spec.seed = seed;
  Planned out;
  size_t ranks = 0;  // one per GPU
  for (const HostSpec& h : spec.hosts) ranks += static_cast<size_t>(h.gpu_count);
  out.identity.resize(ranks);
  out.kept.resize(ranks);
  auto run = sim::run_world(spec, [&](RankBackend& backend) -> Status {
    const size_t r = static_cast<size_t>(backend.world_rank);
    ENGRAM_ASSIGN_OR_RETURN(std::shared_ptr<const SharedPlan> plan, gather_and_decide(backend, options_of(backend.world_rank)));
    out.identity[r] = plan.get();
    out.kept[r] = plan;
    if (r == 0) out.rank0 = plan;
    return Status::ok();
  });
  EXPECT_TRUE(run.is_ok()) << run.status().to_string();
  if (run.is_ok()) EXPECT_TRUE(run->all_ok()) << run->summary();
  return out;
}

RuntimeOptions options_for(int world_size) {
  RuntimeOptions options;
  options.placement_model = "deepseek-v4.1-flash";
  options.layout = ParallelLayout{1, world_size};
  options.config.cpu_offload = true;
  return options;
}

TEST(SharedPlan, OneWorldPlansOnceAndTheWorldFreesThePlan) {
  Planned p = plan_on({host("a-0", 4), host("a-1", 4)}, 1, [](int) { return options_for(8); });
  ASSERT_EQ(p.identity.size(), 8u);
  for (size_t r = 0; r < p.identity.size(); ++r) EXPECT_EQ(p.identity[r], p.identity[0]) << "rank " << r;
  ASSERT_TRUE(p.rank0->plan.is_ok()) << p.rank0->plan.status().to_string();
  EXPECT_EQ(p.rank0->plan->deployment.hosts.size(), 2u);
  p.rank0.reset();
  // Nothing outside the world keeps its plan.
  for (size_t r = 0; r < p.kept.size(); ++r) EXPECT_TRUE(p.kept[r].expired()) << "rank " << r;
}

TEST(SharedPlan, TwoWorldsWithDifferentFactsGetTheirOwnPlans) {
  // The same inputs on both; the first world's plan held while the second runs.
  const Planned one_host = plan_on({host("b-0", 4)}, 2, [](int) { return options_for(4); });
  const Planned two_hosts = plan_on({host("c-0", 2), host("c-1", 2)}, 2, [](int) { return options_for(4); });
  ASSERT_NE(one_host.rank0, two_hosts.rank0);
  ASSERT_TRUE(one_host.rank0->plan.is_ok() && two_hosts.rank0->plan.is_ok());
  EXPECT_EQ(one_host.rank0->plan->deployment.hosts.size(), 1u);
  EXPECT_EQ(one_host.rank0->plan->deployment.hosts[0].name, "b-0");
  EXPECT_EQ(two_hosts.rank0->plan->deployment.hosts.size(), 2u);
  EXPECT_EQ(two_hosts.rank0->plan->deployment.hosts[1].name, "c-1");
}

TEST(SharedPlan, ARankWithOtherInputsGetsAPlanOfItsOwn) {
  const Planned p = plan_on({host("d-0", 4)}, 3, [](int rank) {
    RuntimeOptions options = options_for(4);
    if (rank == 3) options.placement_model = "tiny";
    return options;
  });
  ASSERT_EQ(p.identity.size(), 4u);
  EXPECT_EQ(p.identity[1], p.identity[0]);
  EXPECT_EQ(p.identity[2], p.identity[0]);
  EXPECT_NE(p.identity[3], p.identity[0]);
  ASSERT_TRUE(p.rank0->plan.is_ok());
  EXPECT_EQ(p.rank0->plan->deployment.model, "deepseek-v4.1-flash");
}

}  // namespace
}  // namespace engram
