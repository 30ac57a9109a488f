// What `plan` of a deployment says a rank runs, against what the runtime
// chose on the real cluster (core/plan/planned_rank.h, the bridge of
// `acceptance --file` and `bench --file`).
#include <gtest/gtest.h>

#include "core/deployment_file/deployment_yaml.h"
#include "core/plan/planned_rank.h"

namespace engram {
namespace {

PlanResult plan_of(const std::string& text) {
  auto d = parse_deployment_text(text, "test.yaml");
  EXPECT_TRUE(d.is_ok()) << d.status().to_string();
  WarningSink sink;
  auto plan = plan_deployment(*d, sink);
  EXPECT_TRUE(plan.is_ok()) << plan.status().to_string();
  return std::move(plan).value();
}

TEST(PlannedRank, ThePlansPlacementAndHandleTypeForTheRank) {
  const PlanResult plan = plan_of(
      "model: deepseek-v4.1-flash-layer1\nhosts: [{name: a, gpus: 2}]\nlayout: {tp: 2, dp: 1}\n"
      "config: {peer_shards: true}\n");
  const PlannedRank r1 = planned_rank(plan, 1);
  EXPECT_EQ(r1.placement, Placement::kDevicePeer);
  ASSERT_TRUE(r1.handle_type.has_value());
  EXPECT_EQ(*r1.handle_type, HandleType::kPosixFd);
  EXPECT_EQ(planned_placements(plan), std::vector<Placement>{Placement::kDevicePeer});

  EXPECT_TRUE(runtime_choice_differences(plan, "dep.yaml", 1, Placement::kDevicePeer, HandleType::kPosixFd, "x").empty());
  const auto other = runtime_choice_differences(plan, "dep.yaml", 1, Placement::kDeviceCollective, std::nullopt,
                                                "no peer mapping here");
  ASSERT_EQ(other.size(), 1u);
  EXPECT_EQ(other[0].rfind("rank 1: placement: the plan of dep.yaml gives device_peer (", 0), 0u) << other[0];
  EXPECT_NE(other[0].find("), the runtime chose device_collective (no peer mapping here)"), std::string::npos)
      << other[0];
  const auto handle =
      runtime_choice_differences(plan, "dep.yaml", 0, Placement::kDevicePeer, HandleType::kFabric, "");
  ASSERT_EQ(handle.size(), 1u);
  EXPECT_EQ(handle[0],
            "rank 0: handle type of device_peer: the plan of dep.yaml gives posix_fd, the runtime agreed on fabric");
}

TEST(PlannedRank, APlacementWithoutAHandleTypeIsComparedByPlacementAlone) {
  const PlanResult plan = plan_of(
      "hosts: [{name: a, gpus: 2, shm_size: 64MiB}]\nlayout: {tp: 1, dp: 2}\nconfig: {cpu_offload: true}\n");
  EXPECT_EQ(planned_rank(plan, 0).placement, Placement::kHostHeadSharded);
  EXPECT_FALSE(planned_rank(plan, 0).handle_type.has_value());
  EXPECT_TRUE(runtime_choice_differences(plan, "f", 0, Placement::kHostHeadSharded, std::nullopt, "").empty());
  const auto shared = runtime_choice_differences(plan, "f", 0, Placement::kHostShared, std::nullopt, "");
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_NE(shared[0].find("gives host_head_sharded ("), std::string::npos) << shared[0];
  EXPECT_NE(shared[0].find("the runtime chose host_shared"), std::string::npos) << shared[0];
}

}  // namespace
}  // namespace engram
