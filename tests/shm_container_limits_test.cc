// What containers do to a /dev/shm fill, for real and in the emulator:
//   - a real host writer in a memory cgroup below the table: the kernel
//     charges the tmpfs pages to it and OOM-kills it mid-fill (proved with a
//     raw fallocate), so the real backend refuses first with
//     resource_exhausted naming the cgroup's limit, leaving nothing behind;
//     the emulator, given the same limit per rank, says the same;
//   - a tmpfs whose statvfs total hides a smaller enforced limit (Kubernetes
//     sizeLimit), and the host's RAM, in the emulator;
//   - the copy's NUMA node: readers on the other socket are counted.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "backends/shm/posix_shared_memory.h"
#include "cgroup_support.h"
#include "core/base/units.h"
#include "sim/world.h"

namespace engram {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kLimitBytes = 64 * kMiB;
constexpr uint64_t kTableBytes = 128 * kMiB;

// Runs `work` in a child inside `cgroup`; returns its wait status.
template <typename Work>
int in_cgroup(const testing::TestCgroup& cgroup, Work work) {
  const pid_t child = ::fork();
  if (child == 0) {
    if (!cgroup.add(::getpid())) ::_exit(90);
    ::_exit(work());
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return status;
}

// The words both backends must say.
void expect_cgroup_refusal(const Status& s, const std::string& who) {
  EXPECT_EQ(s.code(), ErrorCode::kResourceExhausted) << who << ": " << s.to_string();
  EXPECT_THAT(s.message(), HasSubstr("charged to the memory cgroup of the process that writes them")) << who;
  EXPECT_THAT(s.message(), HasSubstr("allows 64.0 MiB")) << who;
  EXPECT_THAT(s.message(), HasSubstr("raise the writer's memory limit by the table size")) << who;
  EXPECT_THAT(s.message(), HasSubstr("the segment was removed")) << who;
}

TEST(ShmContainerLimits, AMemoryCgroupBelowTheTableRealAndEmulatedSayTheSame) {
  std::string why;
  auto cgroup = testing::TestCgroup::create("memory", why);
  if (!cgroup) GTEST_SKIP() << "cannot make a memory cgroup here: " << why;
  ASSERT_TRUE(cgroup->set_limit(std::to_string(kLimitBytes)));
  const std::string name = "engramlab-cgtest-" + std::to_string(::getpid());
  const std::string path = "/dev/shm/" + name;

  // 1. The kernel's side: reserving the pages in the cgroup kills the writer,
  // and the file stays behind (what the refusal below prevents).
  const int raw = in_cgroup(*cgroup, [&] {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return 91;
    return ::posix_fallocate(fd, 0, static_cast<off_t>(kTableBytes)) == 0 ? 0 : 92;
  });
  EXPECT_TRUE(WIFSIGNALED(raw) && WTERMSIG(raw) == SIGKILL)
      << "expected the OOM killer; wait status " << raw << " (exit " << WEXITSTATUS(raw) << ")";
  EXPECT_TRUE(std::filesystem::exists(path)) << "a killed writer leaves its segment";
  std::filesystem::remove(path);

  // 2. The real backend refuses before touching a page; nothing is left.
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const int refused = in_cgroup(*cgroup, [&] {
    ::close(pipe_fds[0]);
    shm::PosixSharedMemory shm;
    auto made = shm.create(name, kTableBytes);
    const std::string text = made.is_ok() ? "created" : std::string(error_code_name(made.status().code())) + "\n" +
                                                             made.status().message();
    (void)!::write(pipe_fds[1], text.data(), text.size());
    return made.is_ok() ? 1 : 0;
  });
  ::close(pipe_fds[1]);
  std::string said;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  ASSERT_TRUE(WIFEXITED(refused)) << "the writer was killed: the refusal came too late";
  ASSERT_EQ(WEXITSTATUS(refused), 0) << said;
  const size_t newline = said.find('\n');
  ASSERT_NE(newline, std::string::npos) << said;
  const Status real(ErrorCode::kResourceExhausted, said.substr(newline + 1));
  EXPECT_EQ(said.substr(0, newline), "resource_exhausted");
  expect_cgroup_refusal(real, "real");
  EXPECT_THAT(real.message(), HasSubstr(cgroup->dir()));
  EXPECT_FALSE(std::filesystem::exists(path)) << "the refused segment was left behind";

  // 3. The emulator, with the same limit on the writer rank.
  sim::WorldSpec spec;
  spec.hosts = sim::plain_hosts("node-", 1, 1, "H200");
  spec.hosts[0].tmpfs_bytes_total = 24 * kGiB;  // df shows plenty free
  spec.hosts[0].memory_limit_bytes_per_rank = kLimitBytes;
  Status emulated;
  auto run = sim::run_world(spec, [&](RankBackend& b) -> Status {
    emulated = b.shm->create(name, kTableBytes).status();
    return Status::ok();
  });
  ASSERT_TRUE(run.is_ok());
  expect_cgroup_refusal(emulated, "emulator");
  EXPECT_EQ(emulated.context().step, "shm_write");
  EXPECT_TRUE(run->leaks.empty());
}

TEST(ShmContainerLimits, EmulatedSizeLimitAndHostRamRefuseTheFillAndLeaveNothing) {
  sim::WorldSpec spec;
  spec.hosts = sim::plain_hosts("pod-", 2, 1, "H200");
  spec.hosts[0].tmpfs_bytes_total = 1024 * kGiB;       // an emptyDir shows half the node's RAM
  spec.hosts[0].tmpfs_bytes_enforced = 100 * kGiB;     // its sizeLimit
  spec.hosts[1].tmpfs_bytes_total = 512 * kGiB;
  spec.hosts[1].host_memory_bytes = 128 * kGiB;
  std::vector<Status> got(2);
  auto run = sim::run_world(spec, [&](RankBackend& b) -> Status {
    got[static_cast<size_t>(b.world_rank)] = b.shm->create("engramlab-job-layer1", 189 * kGiB).status();
    ENGRAM_ASSIGN_OR_RETURN(ShmInfo info, b.shm->info());
    if (info.tmpfs_bytes_free != info.tmpfs_bytes_total) return internal_error("the refused segment kept its space");
    return Status::ok();
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_EQ(got[0].code(), ErrorCode::kResourceExhausted);
  EXPECT_THAT(got[0].message(), HasSubstr("statvfs shows 1024.000 GiB in total, but only 100.000 GiB may be used"));
  EXPECT_THAT(got[0].message(), HasSubstr("sizeLimit"));
  EXPECT_EQ(got[1].code(), ErrorCode::kResourceExhausted);
  EXPECT_THAT(got[1].message(), HasSubstr("would exceed its RAM"));
  EXPECT_TRUE(run->leaks.empty());
}

TEST(ShmContainerLimits, EmulatedCopyLivesOnItsWritersSocket) {
  sim::WorldSpec spec;
  spec.hosts = sim::plain_hosts("two-socket-", 1, 8, "H200");
  spec.hosts[0].tmpfs_bytes_total = 512 * kGiB;
  spec.hosts[0].cpu_sockets = 2;
  auto run = sim::run_world(spec, [&](RankBackend& b) -> Status {
    std::unique_ptr<ShmMapping> mine;
    if (b.world_rank == 0) {
      ENGRAM_ASSIGN_OR_RETURN(mine, b.shm->create("table", 4 * kMiB));
    }
    ENGRAM_RETURN_IF_ERROR(b.world->barrier());
    if (b.world_rank != 0) {
      ENGRAM_ASSIGN_OR_RETURN(mine, b.shm->open_read_only("table", 4 * kMiB));
    }
    ENGRAM_RETURN_IF_ERROR(b.world->barrier());
    if (b.world_rank == 0) return b.shm->unlink("table");
    return Status::ok();
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_EQ(run->shm_remote_numa_maps, 4u);  // GPUs 4-7 sit on socket 1; the copy on socket 0
  EXPECT_TRUE(run->leaks.empty());
}

}  // namespace
}  // namespace engram
