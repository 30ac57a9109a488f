// `engramlab shm list|clean` on a real tmpfs directory: a segment whose
// creator was SIGKILLed is listed as stale and removed; one whose creator
// (this test) still runs is listed as in use and kept.
#include <fcntl.h>
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
#include <utility>

#include "backends/ipc/job_token.h"
#include "backends/ipc/socket_dir.h"
#include "backends/shm/posix_shared_memory.h"
#include "tests/engramlab_command.h"

namespace engram {
namespace {

using Output = testing::CommandOutput;
// A name part as a job token gives (core/backend/host_shared_memory.h).
constexpr std::string_view kPart = "0123456789abcdef";

Output run(const std::string& args) { return testing::run_engramlab(args); }

void touch(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr) << path;
  std::fclose(f);
}

// A segment whose creator was SIGKILLed holding it, as a crashed writer does.
void leave_stale_segment(shm::PosixSharedMemory& memory, const std::string& name) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto created = memory.create(name, 1 << 12);
    if (created.is_ok()) ::raise(SIGKILL);
    ::_exit(3);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
}

// The names are those a real run of job cmdjob makes: the job id, then the
// part its token gives (ipc::shm_name_part), which `--job-id` finds without
// the token. Another user's segment under the job's name stays (root only).
TEST(ShmCommand, CleanRemovesOnlySegmentsWhoseCreatorIsGone) {
  char templ[] = "/dev/shm/engramlab-shmcmd-XXXXXX";
  const std::string dir = ::mkdtemp(templ);
  shm::PosixSharedMemory memory({.root_dir = dir});
  auto token = ipc::random_job_token();
  ASSERT_TRUE(token.is_ok()) << token.status().to_string();
  const std::string part = ipc::shm_name_part(*token, "cmdjob");
  const std::string stale = shm::segment_name("cmdjob", part, "layer1");
  const std::string in_use = shm::segment_name("cmdjob", part, "layer14");
  const std::string theirs = shm::segment_name("cmdjob", kPart, "layer1");
  leave_stale_segment(memory, stale);
  leave_stale_segment(memory, theirs);
  const bool as_root = ::geteuid() == 0;
  if (as_root) ASSERT_EQ(::chown((dir + "/" + theirs).c_str(), 65534, 65534), 0);
  auto live = memory.create(in_use, 1 << 16);
  ASSERT_TRUE(live.is_ok()) << live.status().to_string();

  Output listed = run("shm list --job-id cmdjob --dir " + dir);
  EXPECT_EQ(listed.exit_code, 0) << listed.text;
  EXPECT_NE(listed.text.find(stale), std::string::npos) << listed.text;
  EXPECT_NE(listed.text.find(in_use), std::string::npos) << listed.text;

  Output cleaned = run("shm clean --job-id cmdjob --dir " + dir + " --socket-root " + dir + "/no-sockets");
  EXPECT_EQ(cleaned.exit_code, 0) << cleaned.text;
  EXPECT_NE(cleaned.text.find(as_root ? "1 stale segment(s) removed" : "2 stale segment(s) removed"),
            std::string::npos)
      << cleaned.text;
  EXPECT_FALSE(std::filesystem::exists(dir + "/" + stale));
  EXPECT_TRUE(std::filesystem::exists(dir + "/" + in_use)) << "a live creator's segment stays";
  if (as_root) EXPECT_TRUE(std::filesystem::exists(dir + "/" + theirs)) << "another user's is that user's to clean";

  live.value().reset();
  memory.unlink(in_use).ignore();
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
  touch(root + "/" + ipc::kSocketDirMarker);  // engramlab made this root
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

// `--job-id a` takes job a's segments only: job ids may hold '-', and
// "a-b" or "a-layer1" start with "a-".
TEST(ShmCommand, AJobIdSelectsExactlyItsOwnSegments) {
  char templ[] = "/dev/shm/engramlab-shmexact-XXXXXX";
  const std::string dir = ::mkdtemp(templ);
  shm::PosixSharedMemory memory({.root_dir = dir});
  for (const auto& [job, table] : {std::pair{"a", "layer1"}, std::pair{"a", "layer2-tp1"}, std::pair{"a-b", "layer1"},
                                   std::pair{"a-layer1", "layer3"}}) {
    leave_stale_segment(memory, shm::segment_name(job, kPart, table));
  }
  const auto path = [&](const char* job, const char* table) {
    return dir + "/" + shm::segment_name(job, kPart, table);
  };
  Output listed = run("shm list --job-id a --dir " + dir);
  EXPECT_EQ(listed.exit_code, 0) << listed.text;
  EXPECT_NE(listed.text.find(shm::segment_name("a", kPart, "layer1") + " "), std::string::npos) << listed.text;
  EXPECT_EQ(listed.text.find(shm::segment_name("a-b", kPart, "layer1")), std::string::npos) << listed.text;
  EXPECT_EQ(listed.text.find(shm::segment_name("a-layer1", kPart, "layer3")), std::string::npos) << listed.text;

  Output cleaned = run("shm clean --job-id a --dir " + dir + " --socket-root " + dir + "/no-sockets");
  EXPECT_EQ(cleaned.exit_code, 0) << cleaned.text;
  EXPECT_NE(cleaned.text.find("2 stale segment(s) removed"), std::string::npos) << cleaned.text;
  EXPECT_FALSE(std::filesystem::exists(path("a", "layer1")));
  EXPECT_FALSE(std::filesystem::exists(path("a", "layer2-tp1")));
  EXPECT_TRUE(std::filesystem::exists(path("a-b", "layer1"))) << "job a-b's, not a's";
  EXPECT_TRUE(std::filesystem::exists(path("a-layer1", "layer3"))) << "job a-layer1's, not a's";
  std::filesystem::remove_all(dir);
}

// `--socket-root` pointed at a directory engramlab did not make: its empty
// folders (however old) and the directory itself stay.
TEST(ShmCommand, CleanLeavesEmptyFoldersOfADirectoryEngramlabDidNotMake) {
  char templ[] = "/tmp/engramlab-sockhome-XXXXXX";
  const std::string home = ::mkdtemp(templ);
  ::chmod(home.c_str(), 0700);
  const timespec old_times[2] = {{0, UTIME_OMIT}, {::time(nullptr) - 3600, 0}};
  for (const char* folder : {"Desktop", "Downloads"}) {
    ASSERT_EQ(::mkdir((home + "/" + folder).c_str(), 0700), 0);
    ::utimensat(AT_FDCWD, (home + "/" + folder).c_str(), old_times, 0);
  }
  char shm_templ[] = "/dev/shm/engramlab-shmhome-XXXXXX";
  const std::string shm_dir = ::mkdtemp(shm_templ);
  Output cleaned = run("shm clean --dir " + shm_dir + " --socket-root " + home);
  EXPECT_EQ(cleaned.exit_code, 0) << cleaned.text;
  EXPECT_TRUE(std::filesystem::exists(home + "/Desktop")) << cleaned.text;
  EXPECT_TRUE(std::filesystem::exists(home + "/Downloads")) << cleaned.text;
  std::filesystem::remove(home + "/Desktop");
  std::filesystem::remove(home + "/Downloads");
  cleaned = run("shm clean --dir " + shm_dir + " --socket-root " + home);
  EXPECT_TRUE(std::filesystem::exists(home)) << "an empty directory engramlab did not make stays\n" << cleaned.text;
  std::filesystem::remove_all(home);
  std::filesystem::remove_all(shm_dir);
}

}  // namespace
}  // namespace engram
