// `engramlab shm list|clean` on a real tmpfs directory: a segment whose
// creator was SIGKILLed is listed as stale and removed; one whose creator
// (this test) still runs is listed as in use and kept.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include <cstdio>
#include <filesystem>
#include <string>

#include "backends/shm/posix_shared_memory.h"
#include "tests/engramlab_command.h"

namespace engram {
namespace {

using Output = testing::CommandOutput;

Output run(const std::string& args) { return testing::run_engramlab(args); }

TEST(ShmCommand, CleanRemovesOnlySegmentsWhoseCreatorIsGone) {
  char templ[] = "/dev/shm/engramlab-shmcmd-XXXXXX";
  const std::string dir = ::mkdtemp(templ);
  shm::PosixSharedMemory memory({.root_dir = dir});
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto created = memory.create(shm::segment_name("cmdjob", "layer1"), 1 << 16);
    if (created.is_ok()) ::raise(SIGKILL);  // dies holding it, as a crashed writer does
    ::_exit(3);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  auto live = memory.create(shm::segment_name("cmdjob", "layer14"), 1 << 16);
  ASSERT_TRUE(live.is_ok()) << live.status().to_string();

  Output listed = run("shm list --job-id cmdjob --dir " + dir);
  EXPECT_EQ(listed.exit_code, 0) << listed.text;
  EXPECT_NE(listed.text.find("engramlab-cmdjob-layer1"), std::string::npos) << listed.text;
  EXPECT_NE(listed.text.find("engramlab-cmdjob-layer14"), std::string::npos) << listed.text;

  Output cleaned = run("shm clean --job-id cmdjob --dir " + dir + " --socket-root " + dir + "/no-sockets");
  EXPECT_EQ(cleaned.exit_code, 0) << cleaned.text;
  EXPECT_NE(cleaned.text.find("1 stale segment(s) removed"), std::string::npos) << cleaned.text;
  EXPECT_FALSE(std::filesystem::exists(dir + "/engramlab-cmdjob-layer1"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/engramlab-cmdjob-layer14")) << "a live creator's segment stays";

  live.value().reset();
  memory.unlink(shm::segment_name("cmdjob", "layer14")).ignore();
  std::filesystem::remove_all(dir);
}

TEST(ShmCommand, UnknownFlagIsBadInput) { EXPECT_EQ(run("shm clean --jobid x").exit_code, 2); }

TEST(ShmCommand, AMissingDirIsBadInput) {
  for (const char* verb : {"list", "clean"}) {
    Output out = run(std::string("shm ") + verb + " --dir /nonexistent/engramlab-shm");
    EXPECT_EQ(out.exit_code, 2) << out.text;
    EXPECT_NE(out.text.find("--dir /nonexistent/engramlab-shm: no such directory"), std::string::npos) << out.text;
  }
}

// A FIFO named like a segment: list and clean answer at once and leave it.
TEST(ShmCommand, AFifoDoesNotBlockListOrClean) {
  char templ[] = "/dev/shm/engramlab-shmfifo-XXXXXX";
  const std::string dir = ::mkdtemp(templ);
  const std::string fifo = dir + "/engramlab-fifojob-layer1";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  Output listed = run("shm list --dir " + dir);
  Output cleaned = run("shm clean --dir " + dir + " --socket-root " + dir + "/sockets");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(listed.exit_code, 0) << listed.text;
  EXPECT_NE(listed.text.find("a FIFO, not a segment"), std::string::npos) << listed.text;
  EXPECT_EQ(cleaned.exit_code, 0) << cleaned.text;
  EXPECT_TRUE(std::filesystem::exists(fifo));
  std::filesystem::remove_all(dir);
}

// `shm clean` sweeps the socket directory a killed job left.
TEST(ShmCommand, CleanSweepsTheSocketDirectoryOfAnEndedJob) {
  char templ[] = "/tmp/engramlab-sockclean-XXXXXX";
  const std::string base = ::mkdtemp(templ);
  const std::string root = base + "/engramlab-" + std::to_string(::geteuid());
  ASSERT_EQ(::mkdir(root.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((root + "/killedjob").c_str(), 0700), 0);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock = root + "/killedjob/rank-3.sock";
  std::strncpy(addr.sun_path, sock.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(fd);  // what a SIGKILLed rank leaves
  char shm_templ[] = "/dev/shm/engramlab-shmsock-XXXXXX";
  const std::string shm_dir = ::mkdtemp(shm_templ);
  Output cleaned = run("shm clean --dir " + shm_dir + " --socket-root " + root);
  EXPECT_EQ(cleaned.exit_code, 0) << cleaned.text;
  EXPECT_NE(cleaned.text.find(root + "/killedjob: removed"), std::string::npos) << cleaned.text;
  EXPECT_FALSE(std::filesystem::exists(root)) << cleaned.text;
  std::filesystem::remove_all(base);
  std::filesystem::remove_all(shm_dir);
}

}  // namespace
}  // namespace engram
