// The memory verdict with its margin (core/plan/memory_margins.h) and the
// one unit rule: four host_shared ranks in a Kubernetes pod whose limit is
// written 200Gi, 200G or 180Gi. Every verdict names the limit, what is
// charged and the headroom; 200G is a Kubernetes quantity (186.3 GiB) and
// refuses; fixes are the charge plus the stated headroom.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "core/base/units.h"
#include "core/deployment_file/deployment_yaml.h"
#include "core/plan/memory_fit.h"
#include "core/plan/memory_margins.h"
#include "core/report/plan_report.h"

namespace engram {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// DEP4 on one GB300 tray in a pod: /dev/shm an emptyDir of 200Gi, the
// pod's memory limit as written, CPU offload on (host_shared: one 188.8 GiB
// copy, charged to the pod of the rank that writes it).
Deployment pod(const std::string& memory_limit, const std::string& environment = "kubernetes") {
  const std::string text =
      "hosts:\n  - {name: gb300-0, gpus: 4, gpu_model: GB300, shm_size: 200GiB, environment: " + environment +
      ", memory_limit: " + memory_limit + "}\nlayout: {tp: 1, dp: 4}\nconfig: {cpu_offload: true}\n";
  auto d = parse_deployment_text(text, "pod.yaml");
  EXPECT_TRUE(d.is_ok()) << d.status().to_string();
  return d.value();
}

FitCheckedPlan planned(const Deployment& d) {
  WarningSink sink;
  auto checked = plan_with_memory_fit(d, sink);
  EXPECT_TRUE(checked.is_ok()) << checked.status().to_string();
  return std::move(checked).value();
}

const MemoryMargin& limit_margin(const std::vector<MemoryMargin>& margins) {
  for (const MemoryMargin& m : margins)
    if (m.limit == "memory_limit") return m;
  ADD_FAILURE() << "no memory_limit margin";
  return margins.front();
}

bool has_warning(const PlanResult& plan, const std::string& key) {
  for (const Warning& w : plan.warnings)
    if (w.key == key) return true;
  return false;
}

TEST(MemoryVerdict, A200GiPodFitsWithItsHeadroomNamedAndWarnedBelowTheFloor) {
  const FitCheckedPlan p = planned(pod("200Gi"));
  ASSERT_TRUE(p.fits.is_ok()) << p.fits.to_string();
  const MemoryMargin& m = limit_margin(memory_margins(p.plan));
  EXPECT_EQ(m.limit_bytes, 200 * kGiB);
  EXPECT_GT(m.charged_bytes, 188 * kGiB);  // the /dev/shm copy its writer's pod is charged with, and staging
  EXPECT_EQ(m.headroom_bytes, static_cast<int64_t>(m.limit_bytes) - static_cast<int64_t>(m.charged_bytes));
  EXPECT_LT(m.headroom_bytes, static_cast<int64_t>(12 * kGiB));
  EXPECT_EQ(m.floor_bytes, 4 * kHostHeadroomFloorBytesPerRank);
  // Below the floor: a warning that names the limit and what is left, beside "fits".
  EXPECT_TRUE(has_warning(p.plan, "memory.headroom_low"));
  const std::string text = format_plan_report(p.plan);
  EXPECT_THAT(text, HasSubstr("memory verdict"));
  EXPECT_THAT(text, HasSubstr("memory_limit  host gb300-0, ranks 0-3  200.000 GiB"));
  EXPECT_THAT(text, HasSubstr("(low)"));
  EXPECT_THAT(text, HasSubstr("not counted: the engine's own processes"));
  EXPECT_THAT(text, HasSubstr("not counted: the model's weights"));  // the V4.1 preset has no serving figures
  // The same in JSON.
  const Json j = plan_json(p.plan);
  bool found = false;
  for (const Json& margin : j["memory_verdict"]["margins"]) {
    if (margin["limit"] != "memory_limit") continue;
    found = true;
    EXPECT_EQ(margin["limit_bytes"].get<uint64_t>(), 200 * kGiB);
    EXPECT_EQ(margin["headroom_bytes"].get<int64_t>(), m.headroom_bytes);
    EXPECT_EQ(margin["floor_bytes"].get<uint64_t>(), m.floor_bytes);
  }
  EXPECT_TRUE(found) << j.dump();
  EXPECT_FALSE(j["memory_verdict"]["not_counted"].empty());
}

TEST(MemoryVerdict, A200GLimitOnAKubernetesHostIs186GiBAndRefusesWithAFixThatHasHeadroom) {
  const Deployment d = pod("200G");
  ASSERT_TRUE(d.hosts[0].memory_limit_bytes.has_value());
  EXPECT_EQ(*d.hosts[0].memory_limit_bytes, 200'000'000'000ull);  // 186.26 GiB, as the pod spec reads it
  bool echoed = false;
  for (const DefaultUsed& u : d.defaults_used)
    if (u.field == "hosts[0].memory_limit") {
      echoed = true;
      EXPECT_THAT(u.value, HasSubstr("186.26 GiB"));
      EXPECT_THAT(u.value, HasSubstr("200Gi is 200 x 2^30"));
    }
  EXPECT_TRUE(echoed) << "a letter alone in a Kubernetes field is said in both units";
  const FitCheckedPlan p = planned(d);
  ASSERT_FALSE(p.fits.is_ok());
  EXPECT_EQ(p.fits.code(), ErrorCode::kResourceExhausted);
  EXPECT_THAT(p.fits.message(), HasSubstr("memory limit of 186.3 GiB"));
  // The fix is what is charged plus 8 GiB a rank, not the bare size.
  EXPECT_THAT(p.fits.message(), HasSubstr("221GiB (the 188.9 GiB charged + 32.0 GiB headroom"));
  EXPECT_THAT(p.fits.message(), HasSubstr("resources.limits.memory: 221Gi"));
  EXPECT_LT(limit_margin(memory_margins(p.plan)).headroom_bytes, 0);
}

// The plan's warnings and reasons say a fix they share once (issue 48, item
// 7), as doctor does: the first in full, numbered, the others point back.
TEST(MemoryVerdict, AFixSeveralWarningsShareIsSaidOnceInThePlan) {
  FitCheckedPlan p = planned(pod("200Gi"));
  const std::string fix = "give the pod more memory with resources.limits.memory, or put fewer ranks on each host";
  p.plan.warnings = {{"a.first", "host a is tight; " + fix}, {"b.second", "host b is tight; " + fix}};
  p.plan.reasons.push_back("rank 0 on a: tight; " + fix);
  const std::string text = format_plan_report(p.plan);
  EXPECT_THAT(text, HasSubstr("  [a.first] host a is tight; [fix 1] " + fix + "\n"));
  EXPECT_THAT(text, HasSubstr("  [b.second] host b is tight; (fix 1 above)\n"));
  EXPECT_THAT(text, HasSubstr("  - rank 0 on a: tight; (fix 1 above)\n"));  // one numbering for both lists
  EXPECT_EQ(text.find(fix), text.rfind(fix)) << "said once: " << text;
  // The other side: a fix said by one line alone is left as it is.
  p.plan.warnings.pop_back();
  p.plan.reasons.pop_back();
  const std::string alone = format_plan_report(p.plan);
  EXPECT_THAT(alone, HasSubstr("  [a.first] host a is tight; " + fix + "\n"));
  EXPECT_THAT(alone, Not(HasSubstr("[fix 1]")));
}

TEST(MemoryVerdict, A180GiLimitRefuses) {
  const FitCheckedPlan p = planned(pod("180Gi"));
  ASSERT_FALSE(p.fits.is_ok());
  EXPECT_THAT(p.fits.message(), HasSubstr("memory limit of 180.0 GiB"));
  EXPECT_THAT(format_plan_report(p.plan), HasSubstr("(over)"));
}

TEST(MemoryVerdict, ALetterAloneOutsideKubernetesIsAPowerOf1024AndNotEchoed) {
  const Deployment d = pod("200G", "docker");
  EXPECT_EQ(*d.hosts[0].memory_limit_bytes, 200 * kGiB);
  for (const DefaultUsed& u : d.defaults_used) EXPECT_NE(u.field, "hosts[0].memory_limit");
  EXPECT_TRUE(planned(d).fits.is_ok());
}

TEST(MemoryVerdict, OneRankUnderAHostsMemoryLimitIsToldToRaiseThatLimit) {
  auto d = parse_deployment_text(
      "hosts:\n  - {name: box, gpus: 1, gpu_model: H200, host_memory: 2TiB, memory_limit: 100GiB, environment: docker}\n"
      "layout: {tp: 1, dp: 1}\nconfig: {cpu_offload: true}\n",
      "one.yaml");
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  const FitCheckedPlan p = planned(d.value());
  ASSERT_FALSE(p.fits.is_ok());
  EXPECT_THAT(p.fits.message(), HasSubstr("memory_limit: 197GiB in the deployment (--memory-limit 197GiB)"));
  EXPECT_THAT(p.fits.message(), Not(HasSubstr("memory_limit_per_rank")));
}

TEST(MemoryVerdict, ContextLengthWithoutKvFiguresIsAWarningNotSilence) {
  Deployment d = pod("400Gi");
  d.engine.context_length_tokens = 32768;
  const FitCheckedPlan p = planned(d);
  EXPECT_TRUE(has_warning(p.plan, "plan.context_length_unused"));
  d.engine.context_length_tokens.reset();
  EXPECT_FALSE(has_warning(planned(d).plan, "plan.context_length_unused"));
}

TEST(MemoryVerdict, ABareMetalHostsShmIsHalfItsRam) {
  auto d = parse_deployment_text(
      "hosts:\n  - {name: box, gpus: 8, gpu_model: H200, host_memory: 2TiB, environment: bare_metal}\n"
      "layout: {tp: 1, dp: 8}\nconfig: {cpu_offload: true}\n",
      "bare.yaml");
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  const FitCheckedPlan p = planned(d.value());
  EXPECT_EQ(p.plan.deployment.hosts[0].tmpfs_bytes_total, 1024 * kGiB);
  // 1 TiB of /dev/shm holds the 188.8 GiB copy: host_shared, and no advice to remount.
  const std::string text = format_plan_report(p.plan);
  EXPECT_THAT(text, HasSubstr("host_shared"));
  EXPECT_THAT(text, Not(HasSubstr("mount -o remount")));
  EXPECT_THAT(text, HasSubstr("half the host's RAM"));
}

}  // namespace
}  // namespace engram
