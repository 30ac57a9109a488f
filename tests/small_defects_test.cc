// Smaller defects of the second adversarial round, each with the check that
// found it: a user's empty ENGRAMLAB_SOCKET_DIR outlives the job (one the
// job made does not), one machine listed twice is refused, and a /dev/shm
// that is a plain directory on a disk is not taken for a tmpfs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "backends/shm/posix_shared_memory.h"
#include "core/deployment/deployment_validate.h"
#include "core/deployment_file/deployment_yaml.h"
#include "tests/process_run.h"
#include "tests/golden_messages.h"

namespace engram {
namespace {

using ::engram::testing::golden_message;

namespace fs = std::filesystem;
// A name part as a job token gives (core/backend/host_shared_memory.h).
constexpr std::string_view kPart = "0123456789abcdef";
using ::testing::HasSubstr;

const std::string kEngramlab = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab";
const std::string kScenarios = std::string(ENGRAM_SOURCE_DIR) + "/scenarios";

testing::ProcessRun four_ranks_with_socket_dir(const std::string& socket_dir, const std::string& job) {
  return testing::run("ENGRAMLAB_SOCKET_DIR=" + socket_dir + " " + kEngramlab + " launch -n 4 --job-id " + job +
                      " -- " + kEngramlab + " scenario rank " + kScenarios + "/dp1_resolves_disabled.yaml");
}

TEST(SocketDir, AUsersEmptySocketDirectoryOutlivesTheJob) {
  char templ[] = "/tmp/engramlab-usersock-XXXXXX";
  const std::string base = ::mkdtemp(templ);
  const std::string theirs = base + "/mine";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0700), 0);
  const testing::ProcessRun r = four_ranks_with_socket_dir(theirs, "usersock1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(theirs)) << "the user's directory was removed\n" << r.output;
  EXPECT_TRUE(fs::is_empty(theirs)) << "the ranks' sockets stayed";
  // One the job made itself goes with it.
  const std::string made = base + "/made-by-the-job";
  const testing::ProcessRun again = four_ranks_with_socket_dir(made, "usersock2");
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_FALSE(fs::exists(made)) << again.output;
  fs::remove_all(base);
}

TEST(Deployment, OneMachineListedTwiceIsRefused) {
  auto d = parse_deployment_text("hosts:\n  - {name: a, gpus: 4, gpu_model: H200}\n"
                                 "  - {name: a, gpus: 4, gpu_model: H200}\nlayout: {tp: 1, dp: 8}\n",
                                 "twice.yaml");
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  auto completed = validate_and_complete(*d);
  ASSERT_FALSE(completed.is_ok());
  EXPECT_EQ(completed.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(completed.status().message(), HasSubstr("hosts[0] and hosts[1] are both named 'a' (boot id 'boot-a')"));
  // Two machines that share a hostname say so with their boot ids.
  d->hosts[1].boot_id = "second-machine";
  EXPECT_TRUE(validate_and_complete(*d).is_ok());
  const std::string file = "/tmp/engramlab-twice-" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(file) << "hosts:\n  - {name: a, gpus: 4, gpu_model: H200}\n  - {name: a, gpus: 4, gpu_model: H200}\n"
                         "layout: {tp: 1, dp: 8}\n";
  const testing::ProcessRun plan = testing::run(kEngramlab + " plan --file " + file);
  fs::remove(file);
  EXPECT_EQ(plan.exit_code, 2) << plan.output;
  EXPECT_THAT(plan.output, HasSubstr("both named 'a'"));
}

TEST(ShmInfo, APlainDirectoryOnADiskIsNotATmpfs) {
  // The build tree is on a disk here; where it is a tmpfs the check has nothing to prove.
  char templ[] = ENGRAM_BINARY_DIR "/engramlab-notmpfs-XXXXXX";
  const std::string dir = ::mkdtemp(templ);
  struct statfs fs_info{};
  ASSERT_EQ(::statfs(dir.c_str(), &fs_info), 0);
  if (fs_info.f_type == 0x01021994) {
    fs::remove_all(dir);
    GTEST_SKIP() << ENGRAM_BINARY_DIR << " is itself on a tmpfs";
  }
  shm::PosixSharedMemory memory({.root_dir = dir});
  auto info = memory.info();
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_FALSE(info->mounted) << "a disk directory reported as a tmpfs of " << info->tmpfs_bytes_total << " bytes";
  EXPECT_THAT(info->not_tmpfs, HasSubstr(golden_message("shm.not_tmpfs")));
  auto created = memory.create(shm::segment_name("notmpfs", kPart, "layer1"), 4096);
  EXPECT_EQ(created.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_THAT(created.status().message(), HasSubstr("no tmpfs to hold segment"));
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
  // /dev/shm itself still is one.
  auto dev_shm = shm::PosixSharedMemory({.root_dir = "/dev/shm"}).info();
  ASSERT_TRUE(dev_shm.is_ok());
  EXPECT_TRUE(dev_shm->mounted);
}

}  // namespace
}  // namespace engram
