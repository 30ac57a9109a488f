// Another user of the host and the job's shared memory (issue 50, item 10):
// a segment or table-file name another user took first is refused saying so
// (not blamed on "a stale segment left by a crashed run", with advice the
// victim cannot follow), and ENGRAMLAB_SHM_DIR in a directory another user
// owns, or may write without the sticky bit, is refused with the reason.
// (That the names cannot be guessed from the job id: launch_env_test.cc,
// real_runtime_test.cc.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "backends/ipc/real_rank_backend.h"
#include "backends/memfd/proc_fd_shared_memory.h"
#include "backends/shm/posix_shared_memory.h"

namespace engram {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uid_t kNobody = 65534;
// A name part as a job token gives (core/backend/host_shared_memory.h).
constexpr std::string_view kPart = "0123456789abcdef";

struct ShmDir {
  ShmDir() {
    char templ[] = "/dev/shm/engramlab-foreign-XXXXXX";
    path = ::mkdtemp(templ);
  }
  ~ShmDir() { fs::remove_all(path); }
  std::string path;
};

ipc::EnvLookup env_with_shm_dir(const std::string& dir) {
  return [dir](const std::string& name) -> std::optional<std::string> {
    if (name == "ENGRAMLAB_SHM_DIR") return dir;
    return std::nullopt;
  };
}

TEST(ShmForeignOwner, ASegmentNameAnotherUserTookIsRefusedSayingSo) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a file of another uid";
  ShmDir d;
  const std::string name = shm::segment_name("victim-job", kPart, "layer1");
  const std::string squat = d.path + "/" + name;
  std::ofstream(squat) << "not yours";
  ASSERT_EQ(::chown(squat.c_str(), kNobody, kNobody), 0);
  shm::PosixSharedMemory shm({.root_dir = d.path});
  auto created = shm.create(name, 4096);
  ASSERT_FALSE(created.is_ok());
  EXPECT_EQ(created.status().code(), ErrorCode::kAlreadyExists);
  EXPECT_THAT(created.status().message(), HasSubstr("owned by uid 65534, another user"));
  EXPECT_THAT(created.status().message(), Not(HasSubstr("stale")));
  EXPECT_THAT(created.status().message(), Not(HasSubstr("shm clean")));
}

// SGLang's file layout puts its table files in /tmp, shared the same way.
TEST(ShmForeignOwner, ATableFileNameAnotherUserTookIsRefusedSayingSo) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a file of another uid";
  ShmDir d;
  const std::string name = shm_segment_prefix("victim-job", kPart) + "layer1.table";
  const std::string squat = d.path + "/" + name;
  std::ofstream(squat) << "not yours";
  ASSERT_EQ(::chown(squat.c_str(), kNobody, kNobody), 0);
  memfd::ProcFdSharedMemory files(d.path);
  auto created = files.create_file(name, 4096);
  ASSERT_FALSE(created.is_ok());
  EXPECT_EQ(created.status().code(), ErrorCode::kAlreadyExists);
  EXPECT_THAT(created.status().message(), HasSubstr(squat + " failed: it already exists and is owned by uid 65534"));
  EXPECT_THAT(created.status().message(), Not(HasSubstr("rm ")));
}

TEST(ShmForeignOwner, AnShmDirAnotherUserOwnsOrMayWriteIsRefused) {
  ShmDir d;
  const std::string open_dir = d.path + "/open";
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  auto open = ipc::real_backend_options(env_with_shm_dir(open_dir));
  ASSERT_FALSE(open.is_ok());
  EXPECT_THAT(open.status().message(), HasSubstr("may be written by other users (mode 0777, no sticky bit)"));

  ASSERT_EQ(::chmod(open_dir.c_str(), 01777), 0);
  EXPECT_TRUE(ipc::real_backend_options(env_with_shm_dir(open_dir)).is_ok()) << "sticky, as /dev/shm is";
  EXPECT_TRUE(ipc::real_backend_options(env_with_shm_dir(d.path)).is_ok()) << "our own 0700 directory";

  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a directory of another uid";
  const std::string theirs = d.path + "/theirs";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0755), 0);
  ASSERT_EQ(::chown(theirs.c_str(), kNobody, kNobody), 0);
  auto foreign = ipc::real_backend_options(env_with_shm_dir(theirs));
  ASSERT_FALSE(foreign.is_ok());
  EXPECT_THAT(foreign.status().message(), HasSubstr("is owned by uid 65534, another user"));
}

}  // namespace
}  // namespace engram
