// Ranks sharing one GPU (hosts[].ranks_per_gpu, --ranks-per-gpu): written,
// never inferred. The plan gives each rank its share of the GPU and refuses
// placements that run NCCL, naming the GPU, the ranks and the fix; the
// emulator refuses a communicator with two ranks on one GPU as NCCL does;
// device_peer and the host placements run there on the emulator, with no
// communicator set up.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "core/base/units.h"
#include "core/deployment_file/deployment_yaml.h"
#include "core/plan/deployment_plan.h"
#include "harness/emulated_scenario.h"
#include "harness/scenario.h"
#include "sim/world.h"

namespace engram {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

Result<PlanResult> plan_text(const std::string& yaml) {
  ENGRAM_ASSIGN_OR_RETURN(Deployment d, parse_deployment_text(yaml, "gpu_sharing_test"));
  WarningSink sink;
  return plan_deployment(d, sink);
}

const char* kOneH200TwoRanks = R"(
hosts:
  - {name: h200-0, gpus: 1, ranks_per_gpu: 2, gpu_model: H200, shm_size: 64MiB}
layout: {tp: 2, dp: 1}
)";

TEST(GpuSharingPlan, DevicePeerRunsWithHalfTheGpuEachAndSaysSo) {
  auto plan = plan_text(std::string(kOneH200TwoRanks) + "config: {peer_shards: true}\n");
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  ASSERT_EQ(plan->ranks.size(), 2u);
  for (const RankPlan& r : plan->ranks) {
    EXPECT_EQ(r.placement, Placement::kDevicePeer);
    EXPECT_EQ(r.memory.gpu_memory_bytes, plan->deployment.hosts[0].gpu_memory_bytes / 2);
  }
  ASSERT_EQ(plan->hosts.size(), 1u);
  // Both shards on the one GPU: twice a rank's.
  EXPECT_EQ(plan->hosts[0].hbm_bytes_per_gpu_max,
            2 * (plan->ranks[0].memory.hbm_table_bytes + plan->ranks[0].memory.hbm_buffer_bytes));
  EXPECT_EQ(plan->hosts[0].gpu_memory_bytes, plan->deployment.hosts[0].gpu_memory_bytes);
  std::string reasons;
  for (const std::string& r : plan->reasons) reasons += r + "\n";
  EXPECT_THAT(reasons, HasSubstr("host 'h200-0': 2 ranks share each of its 1 GPU (hosts[0].ranks_per_gpu: 2)"));
}

TEST(GpuSharingPlan, DeviceCollectiveIsRefusedNamingTheGpuTheRanksAndTheFix) {
  auto plan = plan_text(std::string(kOneH200TwoRanks));
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_THAT(plan.status().message(),
              AllOf(HasSubstr("ranks 0-1 share GPU 0 of host 'h200-0' (hosts[0].ranks_per_gpu: 2)"),
                    HasSubstr("device_collective runs NCCL"), HasSubstr("ranks_per_gpu: 1"),
                    HasSubstr("config.peer_shards: true (device_peer)"), HasSubstr("config.cpu_offload: true")));
  // Without sharing the same layout plans device_collective.
  auto one_each = plan_text(R"(
hosts:
  - {name: h200-0, gpus: 2, gpu_model: H200, shm_size: 64MiB}
layout: {tp: 2, dp: 1}
)");
  ASSERT_TRUE(one_each.is_ok()) << one_each.status().to_string();
  EXPECT_EQ(one_each->ranks[0].placement, Placement::kDeviceCollective);
}

TEST(GpuSharingPlan, OnlyTheSharedGpusOfAManyGpuHostAreNamed) {
  auto plan = plan_text(R"(
hosts:
  - {name: h200-0, gpus: 2, ranks_per_gpu: 2, gpu_model: H200}
layout: {tp: 4, dp: 1}
)");
  ASSERT_FALSE(plan.is_ok());
  EXPECT_THAT(plan.status().message(), AllOf(HasSubstr("ranks 0-1 share GPU 0 of host 'h200-0'"),
                                             HasSubstr("(and the ranks of 1 more shared GPUs)")));
}

TEST(GpuSharingPlan, HostPlacementsRunOnASharedGpu) {
  auto plan = plan_text(std::string(kOneH200TwoRanks) + "config: {cpu_offload: true}\n");
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  for (const RankPlan& r : plan->ranks) EXPECT_FALSE(is_device_placement(r.placement)) << placement_name(r.placement);
}

TEST(GpuSharingPlan, BadValuesNameTheFieldTheValueAndTheFix) {
  for (const char* value : {"0", "9", "-1", "two"}) {
    auto d = parse_deployment_text(fmt::format(R"(
hosts:
  - {{name: h200-0, gpus: 1, ranks_per_gpu: {}, gpu_model: H200}}
layout: {{tp: 2, dp: 1}}
)",
                                               value),
                                   "bad");
    ASSERT_FALSE(d.is_ok()) << value;
    EXPECT_EQ(d.status().code(), ErrorCode::kInvalidArgument) << value;
    EXPECT_THAT(d.status().message(), HasSubstr("hosts[0].ranks_per_gpu")) << value;
  }
  // The rank count follows: one GPU x 2 ranks is 2 ranks, not 4.
  auto four = plan_text(R"(
hosts:
  - {name: h200-0, gpus: 1, ranks_per_gpu: 2, gpu_model: H200}
layout: {tp: 4, dp: 1}
config: {peer_shards: true}
)");
  ASSERT_FALSE(four.is_ok());
  EXPECT_EQ(four.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(four.status().message(), AllOf(HasSubstr("the hosts give 2"), HasSubstr("ranks_per_gpu ranks per GPU")));
}

// The emulator refuses what NCCL refuses: ncclCommInitRank over two ranks on
// one GPU fails on every member, naming both ranks and the GPU; two ranks on
// two GPUs connect.
TEST(GpuSharingEmulator, ACommunicatorWithTwoRanksOnOneGpuIsRefusedOnEveryMember) {
  sim::WorldSpec shared;
  shared.hosts = sim::plain_hosts("h200-", 1, 1, "H200");
  shared.hosts[0].ranks_per_gpu = 2;
  auto run = sim::run_world(shared, [](RankBackend& b) -> Status {
    auto comm = b.compute->connect(*b.world);
    return comm.is_ok() ? Status::ok() : comm.status();
  });
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  ASSERT_EQ(run->statuses.size(), 2u);
  for (const Status& s : run->statuses) {
    EXPECT_EQ(s.code(), ErrorCode::kFailedPrecondition) << s.to_string();
    EXPECT_THAT(s.message(), AllOf(HasSubstr("ranks 0 and 1 of this communicator are both on GPU 0 of host h200-0"),
                                   HasSubstr("Duplicate GPU")));
  }
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);

  sim::WorldSpec own;
  own.hosts = sim::plain_hosts("h200-", 1, 2, "H200");
  auto fine = sim::run_world(own, [](RankBackend& b) -> Status {
    auto comm = b.compute->connect(*b.world);
    return comm.is_ok() ? Status::ok() : comm.status();
  });
  ASSERT_TRUE(fine.is_ok()) << fine.status().to_string();
  for (const Status& s : fine->statuses) EXPECT_TRUE(s.is_ok()) << s.to_string();
}

harness::ScenarioOutcome run_text(const std::string& text) {
  auto scenario = harness::parse_scenario_text(text, "gpu_sharing_test");
  EXPECT_TRUE(scenario.is_ok()) << scenario.status().to_string();
  if (!scenario.is_ok()) return {};
  return harness::run_scenario(scenario.value());
}

std::string failures_of(const harness::ScenarioOutcome& o) {
  std::string text;
  for (const std::string& f : o.failures) text += "\n  " + f;
  return text;
}

// Through the runtime on the emulator: the ranks learn from their gathered
// facts (one GPU bus id) that they share a GPU, device_peer exchanges and
// looks up with no communicator, and the host placements above tp 1 serve
// their host lookups (their device lookup, a collective through NCCL, is
// not built).
TEST(GpuSharingEmulator, DevicePeerAndHostPlacementsRunThroughTheRuntime) {
  for (const char* config : {"{peer_shards: true}", "{cpu_offload: true, dp_shared_memory: false}",
                             "{cpu_offload: true}"}) {
    const harness::ScenarioOutcome o = run_text(fmt::format(R"(
description: sharing
hosts:
  - {{name: h200-0, gpus: 2, ranks_per_gpu: 2, gpu_model: H200, shm_size: 400GiB}}
layout: {{tp: 2, dp: 2}}
config: {}
seed: 3
lookup: {{model: tiny, tokens: 16, run: true}}
expect:
  lookup_equal: true
)",
                                                            config));
    EXPECT_TRUE(o.passed) << config << failures_of(o);
  }
}

}  // namespace
}  // namespace engram
