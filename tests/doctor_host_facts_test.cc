// `engramlab doctor` reads the host as a real run does, through the
// backends' probes (backends/ipc/proc_host_probe, backends/shm's info):
// a /dev/shm that is a plain directory is no tmpfs to the doctor either, a
// tmpfs of 64 MiB is read as 64 MiB, and ENGRAMLAB_ENVIRONMENT names the
// environment as it does for the runtime. Each /dev/shm case runs in a
// private mount namespace (root and unshare(1) needed; skipped, saying so,
// without them).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "engramlab_command.h"

namespace engram::testing {
namespace {

std::string why_no_mount_namespace() {
  if (::geteuid() != 0) return "needs root (unshare --mount, mount)";
  if (std::system("unshare --mount --propagation private true >/dev/null 2>&1") != 0)
    return "unshare --mount is not permitted here";
  return "";
}

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
  if (const std::string why = why_no_mount_namespace(); !why.empty()) GTEST_SKIP() << why;
  char name[] = "/tmp/doctor_shm_dir_XXXXXX";
  ASSERT_NE(::mkdtemp(name), nullptr);
  const nlohmann::json doc = doctor_with_shm(std::string("--bind ") + name);
  ::rmdir(name);
  ASSERT_TRUE(doc.contains("shm")) << doc.dump();
  EXPECT_EQ(doc["shm"]["mounted"], false) << doc.dump();
  ASSERT_TRUE(doc["shm"]["not_tmpfs"].is_string()) << doc.dump();
  EXPECT_NE(doc["shm"]["not_tmpfs"].get<std::string>().find("not a tmpfs"), std::string::npos) << doc.dump();
}

TEST(DoctorHostFacts, ATmpfsIsReadAtItsSize) {
  if (const std::string why = why_no_mount_namespace(); !why.empty()) GTEST_SKIP() << why;
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

}  // namespace
}  // namespace engram::testing
