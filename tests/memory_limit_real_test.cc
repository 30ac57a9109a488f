// A memory limit below a host_private table, for real: one rank launched
// (`engramlab launch -n 1 -- engramlab scenario rank FILE`) inside a memory
// cgroup of 1 GiB is refused with resource_exhausted at its decision, before
// anything is allocated, and exits; it is not SIGKILLed, as a process that
// touches more than the limit in the same cgroup is. Its error is word for
// word what `engramlab plan` says of the same deployment and what the
// emulator's ranks say (`engramlab scenario run`). The rank stands for the
// file's host as `scenario run --real` makes it: its hostname is this
// machine's, its RAM the file's (a scenario's rank takes its host's
// host_memory), its environment the file's (ENGRAMLAB_ENVIRONMENT); its
// memory cgroup is its own. Skipped, saying why, where no memory cgroup
// can be made (no root, no memory controller, a read-only /sys/fs/cgroup).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "backends/memfd/proc_fd_shared_memory.h"
#include "tests/cgroup_support.h"
#include "tests/process_run.h"
#include "tests/temp_dir.h"

namespace engram {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kEngramlab = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab";
constexpr uint64_t kLimitBytes = uint64_t{1} << 30;

// Runs `command` under sh in a child that joins `cgroup` first; its wait status.
int run_in_cgroup(const testing::TestCgroup& cgroup, const std::string& command) {
  const pid_t child = ::fork();
  if (child == 0) {
    if (!cgroup.add(::getpid())) ::_exit(90);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return status;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The message after "resource_exhausted: " on `plan`'s error line.
std::string plan_error_message(const std::string& output) {
  const std::string marker = "engramlab plan: error: resource_exhausted: ";
  const size_t at = output.find(marker);
  if (at == std::string::npos) return "";
  const size_t end = output.find('\n', at);
  return output.substr(at + marker.size(), end == std::string::npos ? std::string::npos : end - at - marker.size());
}

TEST(MemoryLimitReal, AOneGibCgroupRefusesHostPrivateBeforeTheFillAsPlanAndTheEmulatorDo) {
  std::string why;
  auto cgroup = testing::TestCgroup::create("memory", why);
  if (!cgroup) GTEST_SKIP() << "SKIPPED: cannot make a memory cgroup here: " << why;
  ASSERT_TRUE(cgroup->set_limit(std::to_string(kLimitBytes)));
  testing::TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  char hostname[256] = {};
  ASSERT_EQ(::gethostname(hostname, sizeof hostname - 1), 0);

  // The deployment: this machine's name, one rank with CPU offload (host_private,
  // V4.1's 188.8 GiB), a host of 2 TiB, a 1 GiB limit per rank.
  const std::string deployment =
      std::string("hosts:\n  - {name: '") + hostname +
      "', gpus: 1, gpu_model: H200, host_memory: 2TiB, memory_limit_per_rank: 1GiB, environment: bare_metal}\n"
      "layout: {tp: 1, dp: 1}\nconfig: {cpu_offload: true}\n";
  std::ofstream(dir.path + "/deployment.yaml") << deployment;
  std::ofstream(dir.path + "/scenario.yaml")
      << deployment << "seed: 5\nlookup: {tokens: 2}\n"
      << "expect:\n  error: {kind: resource_exhausted, contains: ['memory limit of 1.0 GiB'], step: decide placement}\n";

  // 1. plan.
  const testing::ProcessRun plan = testing::run(kEngramlab + " plan --file " + dir.path + "/deployment.yaml");
  EXPECT_EQ(plan.exit_code, 1) << plan.output;
  const std::string planned = plan_error_message(plan.output);
  ASSERT_FALSE(planned.empty()) << plan.output;
  EXPECT_THAT(planned, HasSubstr("(host_private) runs under a memory limit of 1.0 GiB, below the 188.8 GiB"));
  EXPECT_THAT(planned, HasSubstr("memory_limit_per_rank: 197GiB"));
  EXPECT_THAT(planned, HasSubstr("systemd MemoryMax=197G"));

  // 2. The emulator's ranks.
  const testing::ProcessRun emulated = testing::run(kEngramlab + " scenario run --json " + dir.path + "/scenario.yaml");
  EXPECT_EQ(emulated.exit_code, 0) << emulated.output;
  const size_t brace = emulated.output.find('{');
  ASSERT_NE(brace, std::string::npos) << emulated.output;
  const nlohmann::json doc = nlohmann::json::parse(emulated.output.substr(brace), nullptr, false);
  ASSERT_TRUE(doc.contains("scenarios")) << emulated.output;
  EXPECT_EQ(doc["scenarios"][0]["error"]["message"], planned);

  // 3. A real rank in the 1 GiB cgroup: refused, exiting, not killed.
  const std::string out = dir.path + "/rank.out";
  const int status = run_in_cgroup(
      *cgroup, "ENGRAMLAB_ENVIRONMENT=bare_metal " + kEngramlab + " launch -n 1 -- " +
                   kEngramlab + " scenario rank " + dir.path + "/scenario.yaml >" + out + " 2>&1");
  const std::string said = read_file(out);
  ASSERT_TRUE(WIFEXITED(status)) << "the launcher was killed (signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                                 << ")\n" << said;
  EXPECT_THAT(said, Not(HasSubstr("SIGKILL"))) << said;
  const size_t record = said.find("{\"rank\":0");
  ASSERT_NE(record, std::string::npos) << said;
  const nlohmann::json rank = nlohmann::json::parse(said.substr(record, said.find('\n', record) - record), nullptr, false);
  ASSERT_TRUE(rank.is_object()) << said;
  EXPECT_EQ(rank["started"], false) << said;
  ASSERT_TRUE(rank["error"].is_object()) << said;
  EXPECT_EQ(rank["error"]["code"], "resource_exhausted") << said;
  EXPECT_EQ(rank["error"]["step"], "decide placement") << said;
  EXPECT_EQ(rank["error"]["message"], planned) << said;

  // 4. The kernel's side, in the same cgroup: touching more than the limit
  // is a SIGKILL (what filling the table would have met).
  const pid_t child = ::fork();
  if (child == 0) {
    if (!cgroup->add(::getpid())) ::_exit(90);
    const size_t bytes = 2 * kLimitBytes;
    char* memory = static_cast<char*>(std::malloc(bytes));
    if (memory == nullptr) ::_exit(91);
    for (size_t i = 0; i < bytes; i += 4096) memory[i] = 1;
    ::_exit(0);
  }
  int killed = 0;
  ::waitpid(child, &killed, 0);
  EXPECT_TRUE(WIFSIGNALED(killed) && WTERMSIG(killed) == SIGKILL)
      << "expected the OOM killer past the 1 GiB limit; wait status " << killed;
}


// SGLang's layouts fill a memfd (or a table file) as the POSIX segments fill
// /dev/shm: past the memory cgroup's headroom the table is refused before a
// page is written, naming the limit, and the process lives (no OOM kill, no
// SIGBUS mid-fill); under it the pages are reserved before the map.
TEST(MemoryLimitReal, AMemfdTablePastTheCgroupsHeadroomIsRefusedBeforeItsFill) {
  std::string why;
  auto cgroup = testing::TestCgroup::create("memory", why);
  if (!cgroup) GTEST_SKIP() << "SKIPPED: cannot make a memory cgroup here: " << why;
  constexpr uint64_t kSmallLimitBytes = uint64_t{64} << 20;
  ASSERT_TRUE(cgroup->set_limit(std::to_string(kSmallLimitBytes)));
  const testing::ChildRun run = testing::run_in_child([&] {
    if (!cgroup->add(::getpid())) ::_exit(90);
    memfd::ProcFdSharedMemory memory;
    auto refused = memory.create("engramlab-test-table", 4 * kSmallLimitBytes);
    auto fits = memory.create("engramlab-test-small", kSmallLimitBytes / 8);
    return (refused.is_ok() ? std::string("created") : refused.status().to_string()) + "\n" +
           (fits.is_ok() ? std::string("created") : fits.status().to_string());
  });
  const std::string& said = run.said;
  ASSERT_TRUE(WIFEXITED(run.wait_status) && WEXITSTATUS(run.wait_status) == 0)
      << "wait status " << run.wait_status << "; said: " << said;
  const std::string refused = said.substr(0, said.find('\n'));
  const std::string fits = said.substr(said.find('\n') + 1);
  EXPECT_THAT(refused, HasSubstr("resource_exhausted"));
  EXPECT_THAT(refused, HasSubstr("filling memfd engramlab-test-table (256.0 MiB)"));
  EXPECT_THAT(refused, HasSubstr("memory cgroup"));
  EXPECT_THAT(refused, HasSubstr("allows 64.0 MiB"));
  EXPECT_EQ(fits, "created");
}
}  // namespace
}  // namespace engram
