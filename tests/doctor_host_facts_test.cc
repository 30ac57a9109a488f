// `engramlab doctor` reads the host as a real run does, through the
// backends' probes (backends/ipc/proc_host_probe, backends/shm's info):
// a /dev/shm that is a plain directory is no tmpfs to the doctor either, a
// tmpfs of 64 MiB is read as 64 MiB, and ENGRAMLAB_ENVIRONMENT names the
// environment as it does for the runtime. Each /dev/shm case runs in a
// private mount namespace (root and unshare(1) needed; skipped, saying so,
// without them).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "backends/ipc/iommu_probe.h"
#include "engramlab_command.h"
#include "tests/cgroup_support.h"
#include "tests/private_tmpfs.h"
#include "tests/golden_messages.h"

namespace engram::testing {
namespace {

using ::engram::testing::golden_message;

// `engramlab doctor --json` with /dev/shm replaced by what `mount_args` mounts.
nlohmann::json doctor_with_shm(const std::string& mount_args) {
  const CommandOutput out = run_engramlab("doctor --json", "unshare --mount --propagation private sh -c 'mount " +
                                                               mount_args + " /dev/shm && exec \"$0\" \"$@\"'");
  EXPECT_EQ(out.exit_code, 0) << out.text;
  const size_t brace = out.text.find('{');
  if (brace == std::string::npos) return {};
  return nlohmann::json::parse(out.text.substr(brace), nullptr, false);
}

TEST(DoctorHostFacts, APlainDirectoryOverDevShmIsNoTmpfs) {
  if (const std::string& why = why_no_private_tmpfs(); !why.empty()) GTEST_SKIP() << why;
  char name[] = "/tmp/doctor_shm_dir_XXXXXX";
  ASSERT_NE(::mkdtemp(name), nullptr);
  const nlohmann::json doc = doctor_with_shm(std::string("--bind ") + name);
  ::rmdir(name);
  ASSERT_TRUE(doc.contains("shm")) << doc.dump();
  EXPECT_EQ(doc["shm"]["mounted"], false) << doc.dump();
  ASSERT_TRUE(doc["shm"]["not_tmpfs"].is_string()) << doc.dump();
  EXPECT_NE(doc["shm"]["not_tmpfs"].get<std::string>().find(golden_message("shm.not_tmpfs")), std::string::npos) << doc.dump();
}

TEST(DoctorHostFacts, ATmpfsIsReadAtItsSize) {
  if (const std::string& why = why_no_private_tmpfs(); !why.empty()) GTEST_SKIP() << why;
  const nlohmann::json doc = doctor_with_shm("-t tmpfs -o size=64m tmpfs");
  ASSERT_TRUE(doc.contains("shm")) << doc.dump();
  EXPECT_EQ(doc["shm"]["mounted"], true) << doc.dump();
  EXPECT_EQ(doc["shm"]["total_bytes"], 64u << 20) << doc.dump();
  EXPECT_TRUE(doc["shm"]["not_tmpfs"].is_null()) << doc.dump();
}

TEST(DoctorHostFacts, TheEnvironmentIsTheOneTheRuntimeSees) {
  const CommandOutput out = run_engramlab("doctor", "ENGRAMLAB_ENVIRONMENT=kubernetes");
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_NE(out.text.find("; kubernetes)"), std::string::npos) << out.text;
}

// `doctor --json`'s document (empty when it printed none).
nlohmann::json doctor_json(const std::string& args = "", const std::string& prefix = "") {
  const CommandOutput out = run_engramlab("doctor --json " + args, prefix);
  EXPECT_EQ(out.exit_code, 0) << out.text;
  const size_t brace = out.text.find('{');
  if (brace == std::string::npos) return {};
  return nlohmann::json::parse(out.text.substr(brace), nullptr, false);
}

nlohmann::json verdict_of(const nlohmann::json& doc, const std::string& placement) {
  for (const nlohmann::json& v : doc["placements"])
    if (v["placement"] == placement) return v;
  ADD_FAILURE() << placement << " has no verdict: " << doc.dump();
  return {};
}

// The doctor reads MemTotal and judges host_private with the memory fit: on
// a machine with less RAM than V4.1's tables (188.8 GiB at tp 1) it is not
// "available" but refused, naming both sizes.
TEST(DoctorHostFacts, HostPrivateIsJudgedAgainstTheRam) {
  const nlohmann::json doc = doctor_json();
  ASSERT_TRUE(doc.contains("memory")) << doc.dump();
  ASSERT_TRUE(doc["memory"]["host_memory_bytes"].is_number()) << doc.dump();
  const uint64_t ram = doc["memory"]["host_memory_bytes"].get<uint64_t>();
  if (ram >= 202'758'032'400ull) GTEST_SKIP() << "SKIPPED: this machine's RAM holds V4.1's tables";
  const nlohmann::json v = verdict_of(doc, "host_private");
  EXPECT_EQ(v["fits"], false) << v.dump();
  const std::string text = v["verdict"].get<std::string>();
  EXPECT_THAT(text, ::testing::HasSubstr("does not fit here"));
  EXPECT_THAT(text, ::testing::HasSubstr("take 188.8 GiB, more than the host's"));
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("available")));
  EXPECT_TRUE(doc["transparent_hugepages"].is_object()) << doc.dump();
}

// A fix that would repeat under every placement it applies to is said once,
// numbered, and referenced after (issue 48: a 400-character fix repeated for
// each placement). Past the RAM, host_private's fixes are [fix 1] and [fix 2].
TEST(DoctorHostFacts, EachFixIsSaidOnceAndReferencedAfter) {
  const CommandOutput out = run_engramlab("doctor");
  ASSERT_EQ(out.exit_code, 0) << out.text;
  if (out.text.find("does not fit here") == std::string::npos)
    GTEST_SKIP() << "SKIPPED: this machine's RAM holds V4.1's tables, so no placement needs a fix";
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = out.text.find(what); at != std::string::npos; at = out.text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("[fix 1]"), 1u) << out.text;
  EXPECT_EQ(count("host_private keeps one table per replica"), 1u) << out.text;
  EXPECT_GE(count("(fixes 1-2 above)"), 1u) << out.text;
}

// What the host allows for host reads: the IOMMU as sysfs has it, the same
// facts the probe reads (backends/ipc/iommu_probe.h), in --json and in the text.
TEST(DoctorHostFacts, TheIommuIsReported) {
  const nlohmann::json doc = doctor_json();
  ASSERT_TRUE(doc["iommu"].is_object()) << doc.dump();
  const engram::ipc::IommuFacts here = engram::ipc::read_iommu_facts();
  EXPECT_EQ(doc["iommu"]["groups"].get<int>(), here.group_count);
  EXPECT_EQ(doc["iommu"]["translated"].get<bool>(), here.translated);
  EXPECT_EQ(doc["iommu"]["summary"].get<std::string>(), engram::ipc::iommu_text(here));
}

// In a memory cgroup of 1 GiB the doctor reads its limit (v2 memory.max or
// v1 memory.limit_in_bytes) and the fit names it for the ranks started here.
TEST(DoctorHostFacts, AMemoryCgroupIsReadAndJudged) {
  std::string why;
  auto cgroup = TestCgroup::create("memory", why);
  if (!cgroup) GTEST_SKIP() << "SKIPPED: cannot make a memory cgroup here: " << why;
  ASSERT_TRUE(cgroup->set_limit(std::to_string(1u << 30)));
  const nlohmann::json doc =
      doctor_json("", "sh -c 'echo $$ > " + cgroup->dir() + "/cgroup.procs && exec \"$0\" \"$@\"'");
  ASSERT_TRUE(doc.contains("memory")) << doc.dump();
  ASSERT_TRUE(doc["memory"]["cgroup"].is_object()) << doc.dump();
  EXPECT_EQ(doc["memory"]["cgroup"]["limit_bytes"], 1u << 30) << doc.dump();
  EXPECT_EQ(doc["memory"]["cgroup"]["path"], cgroup->dir()) << doc.dump();
  const nlohmann::json v = verdict_of(doc, "host_private");
  EXPECT_EQ(v["fits"], false) << v.dump();
  EXPECT_THAT(v["verdict"].get<std::string>(), ::testing::HasSubstr("under a memory limit of 1.0 GiB")) << v.dump();
}

}  // namespace
}  // namespace engram::testing
