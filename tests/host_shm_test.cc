// PosixSharedMemory on real tmpfs: /dev/shm-like dirs made per test, a real
// 64 MiB tmpfs inside a private mount namespace, and stale segments left by
// a process that really died.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "backends/shm/posix_shared_memory.h"
#include "backends/shm/segment_header.h"
#include "backends/shm/stale_segments.h"
#include "core/base/units.h"
#include "core/placements/host_shared.h"
#include "tests/private_tmpfs.h"
#include "tests/golden_messages.h"

namespace engram::shm {
namespace {

using ::engram::testing::golden_message;

namespace fs = std::filesystem;
// A name part as a job token gives (core/backend/host_shared_memory.h).
constexpr std::string_view kPart = "0123456789abcdef";

class ScratchDir {
 public:
  ScratchDir() {
    char templ[] = "/dev/shm/engramlab-test-XXXXXX";
    path_ = ::mkdtemp(templ);
  }
  ~ScratchDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

size_t entries(const std::string& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

TEST(HostShm, CreateThenReadOnlyMapSeesTheSameBytes) {
  ScratchDir dir;
  PosixSharedMemory memory({.root_dir = dir.path()});
  const std::string name = segment_name("job1", kPart, "layer1");
  EXPECT_EQ(name, "engramlab-job1-0123456789abcdef-layer1");
  auto created = memory.create(name, 10000);
  ASSERT_TRUE(created.is_ok()) << created.status().to_string();
  for (size_t i = 0; i < 10000; ++i) (*created)->bytes()[i] = static_cast<std::byte>(i * 7);
  auto reader = memory.open_read_only(name, 10000);
  ASSERT_TRUE(reader.is_ok()) << reader.status().to_string();
  EXPECT_TRUE((*reader)->bytes().empty());  // read-only: no writable view
  ASSERT_EQ((*reader)->data().size(), 10000u);
  for (size_t i = 0; i < 10000; ++i) ASSERT_EQ((*reader)->data()[i], static_cast<std::byte>(i * 7));
  // A size the writer did not make is refused, not silently mapped.
  auto wrong = memory.open_read_only(name, 9999);
  EXPECT_EQ(wrong.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_TRUE(memory.unlink(name).is_ok());
  EXPECT_EQ(memory.unlink(name).code(), ErrorCode::kNotFound);
  EXPECT_EQ(memory.open_read_only(name, 10000).status().code(), ErrorCode::kNotFound);
}

TEST(HostShm, ModeIs0600WhateverTheUmask) {
  ScratchDir dir;
  PosixSharedMemory memory({.root_dir = dir.path()});
  const mode_t old = ::umask(0);
  auto created = memory.create("engramlab-j-t", 4096);
  ::umask(old);
  ASSERT_TRUE(created.is_ok());
  struct stat st{};
  ASSERT_EQ(::stat((dir.path() + "/engramlab-j-t").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(HostShm, InfoReadsTheTmpfsAndAMissingDirIsNotMounted) {
  PosixSharedMemory missing({.root_dir = "/nonexistent/engramlab-shm"});
  auto info = missing.info();
  ASSERT_TRUE(info.is_ok());
  EXPECT_FALSE(info->mounted);
  auto created = missing.create("engramlab-j-t", 10);
  EXPECT_EQ(created.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(created.status().message().find("does not exist"), std::string::npos);

  ScratchDir dir;
  auto real = PosixSharedMemory({.root_dir = dir.path()}).info();
  ASSERT_TRUE(real.is_ok());
  EXPECT_TRUE(real->mounted);
  EXPECT_GT(real->tmpfs_bytes_total, 0u);
  EXPECT_LE(real->tmpfs_bytes_free, real->tmpfs_bytes_total);
}

TEST(HostShm, BadNamesAreRefused) {
  ScratchDir dir;
  PosixSharedMemory memory({.root_dir = dir.path()});
  EXPECT_EQ(memory.create("a/b", 10).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(memory.create("", 10).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(memory.create("x", 0).status().code(), ErrorCode::kInvalidArgument);
}

// A child creates a segment and dies without cleaning up, as a crashed rank does.
void leave_segment_from_dead_process(const std::string& dir, const std::string& name) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    PosixSharedMemory memory({.root_dir = dir});
    auto created = memory.create(name, 8192);
    if (!created.is_ok()) ::_exit(1);
    (void)created->release();  // never unmapped or unlinked
    ::kill(::getpid(), SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
}

TEST(HostShm, StaleSegmentIsReportedNotReusedAndCanBeCleaned) {
  ScratchDir dir;
  const std::string name = segment_name("crashy", kPart, "layer14");
  leave_segment_from_dead_process(dir.path(), name);

  PosixSharedMemory memory({.root_dir = dir.path()});
  auto again = memory.create(name, 8192);
  ASSERT_EQ(again.status().code(), ErrorCode::kAlreadyExists);
  const std::string& message = again.status().message();
  EXPECT_NE(message.find(name), std::string::npos) << message;
  EXPECT_NE(message.find("no longer running"), std::string::npos) << message;
  EXPECT_NE(message.find("rm " + dir.path() + "/" + name), std::string::npos) << message;

  // A live segment of the same job (ours) is in use and must survive cleanup.
  auto live = memory.create(segment_name("crashy", kPart, "layer1"), 4096);
  ASSERT_TRUE(live.is_ok());
  auto other_job = memory.create(segment_name("otherjob", kPart, "layer1"), 4096);
  ASSERT_TRUE(other_job.is_ok());

  auto listed = list_segments(dir.path(), SegmentScope::of_job("crashy"));
  ASSERT_TRUE(listed.is_ok());
  ASSERT_EQ(listed->size(), 2u);
  auto removed = remove_stale_segments(dir.path(), SegmentScope::of_job("crashy"));
  ASSERT_TRUE(removed.is_ok());
  ASSERT_EQ(removed->size(), 1u);
  EXPECT_EQ((*removed)[0].name, name);
  EXPECT_NE((*removed)[0].describe().find("stale"), std::string::npos);
  EXPECT_EQ(entries(dir.path()), 2u);  // the live one and the other job's
  EXPECT_TRUE(memory.create(name, 8192).is_ok());

  // A live creator's segment is reported as in use.
  auto in_use = memory.create(segment_name("crashy", kPart, "layer1"), 4096);
  ASSERT_EQ(in_use.status().code(), ErrorCode::kAlreadyExists);
  EXPECT_NE(in_use.status().message().find("still running"), std::string::npos);
}

// Job ids may hold '-' and prefix each other: job "a" takes exactly its own
// segment names (<part>-layer<L>, <part>-layer<L>-tp<T>), of any run (any
// part), never "a-b"'s, "a-layer1"'s or "a-<16 hex>"'s, in listings and in
// the start-up cleanup alike.
TEST(HostShm, AJobIdThatPrefixesAnotherTakesOnlyItsOwnSegments) {
  ScratchDir dir;
  const std::string another_run = "fedcba9876543210";
  const std::vector<std::string> mine = {segment_name("a", kPart, "layer1"), segment_name("a", kPart, "layer14-tp3"),
                                         segment_name("a", another_run, "layer2")};
  const std::vector<std::string> others = {
      segment_name("a-b", kPart, "layer1"),      segment_name("a-layer1", kPart, "layer2"),
      segment_name("a-b", kPart, "layer14-tp0"), segment_name("a", kPart, "layer1-tp2-x"),
      segment_name("a", kPart, "layers"),        segment_name("ab", kPart, "layer1"),
      segment_name("a-" + std::string(kPart), another_run, "layer1"),
      "engramlab-a-layer1",  // the form before names carried a part
      "engramlab-a-0123456789ABCDEF-layer1",  "engramlab-a-0123456789abcde-layer1"};
  for (const auto& name : mine) leave_segment_from_dead_process(dir.path(), name);
  for (const auto& name : others) leave_segment_from_dead_process(dir.path(), name);

  auto listed = list_segments(dir.path(), SegmentScope::of_job("a"));
  ASSERT_TRUE(listed.is_ok()) << listed.status().to_string();
  std::vector<std::string> names;
  for (const auto& r : *listed) names.push_back(r.name);
  EXPECT_EQ(names, mine);
  auto removed = remove_stale_segments(dir.path(), SegmentScope::of_job("a"));
  ASSERT_TRUE(removed.is_ok()) << removed.status().to_string();
  EXPECT_EQ(removed->size(), mine.size());
  for (const auto& name : mine) EXPECT_FALSE(fs::exists(dir.path() + "/" + name)) << name;
  for (const auto& name : others) EXPECT_TRUE(fs::exists(dir.path() + "/" + name)) << name << " is not job a's";

  auto theirs = remove_stale_segments(dir.path(), SegmentScope::of_job("a-b"));
  ASSERT_TRUE(theirs.is_ok());
  EXPECT_EQ(theirs->size(), 2u) << "job a-b takes its own two";
}

// The exact match follows the names host_shared really makes.
TEST(HostShm, TheJobMatchTakesEveryNameHostSharedMakes) {
  for (int tp : {1, 4}) {
    for (int t = 0; t < tp; ++t) {
      const std::string name = host_table_slice_segment_name("a", kPart, 14, tp, t);
      EXPECT_TRUE(is_job_segment_name(name, "a")) << name;
      EXPECT_FALSE(is_job_segment_name(name, "a-b")) << name;
      EXPECT_FALSE(is_job_segment_name(host_table_slice_segment_name("a-b", kPart, 14, tp, t), "a")) << name;
    }
  }
}

// A reader's map keeps the segment in use after its creator died: the lock
// is held by everyone who maps it, and clean goes by the lock.
TEST(HostShm, AReadersMapKeepsASegmentInUseAfterItsCreatorDied) {
  ScratchDir dir;
  const std::string name = segment_name("readerjob", kPart, "layer1");
  int ready[2], go[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    PosixSharedMemory memory({.root_dir = dir.path()});
    auto created = memory.create(name, 8192);
    char byte = created.is_ok() ? 1 : 0;
    (void)::write(ready[1], &byte, 1);
    (void)::read(go[0], &byte, 1);
    ::raise(SIGKILL);
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ASSERT_EQ(byte, 1);
  PosixSharedMemory memory({.root_dir = dir.path()});
  auto reader = memory.open_read_only(name, 8192);
  ASSERT_TRUE(reader.is_ok()) << reader.status().to_string();
  ASSERT_EQ(::write(go[1], &byte, 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  for (int fd : {ready[0], ready[1], go[0], go[1]}) ::close(fd);

  auto removed = remove_stale_segments(dir.path(), SegmentScope::of_job("readerjob"));
  ASSERT_TRUE(removed.is_ok());
  EXPECT_TRUE(removed->empty()) << "a segment a reader maps is in use";
  auto listed = list_segments(dir.path(), SegmentScope::of_job("readerjob"));
  ASSERT_TRUE(listed.is_ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_NE((*listed)[0].describe().find(golden_message("shm.segment_in_use")), std::string::npos)
      << (*listed)[0].describe();
  reader.value().reset();
  removed = remove_stale_segments(dir.path(), SegmentScope::of_job("readerjob"));
  ASSERT_TRUE(removed.is_ok());
  EXPECT_EQ(removed->size(), 1u) << "nobody maps it any more";
}

// A header that says its maker held no lock (a build before the lock) cannot
// be judged: a pid proves nothing across PID namespaces, so clean keeps it.
TEST(HostShm, ASegmentWhoseMakerHeldNoLockIsKeptWithTheReason) {
  ScratchDir dir;
  const std::string path = dir.path() + "/" + segment_name("oldjob", kPart, "layer1");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  const SegmentHeader header = make_header_for_this_process(4096, /*holds_lock=*/false);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(kSegmentHeaderBytes + 4096)), 0);
  ASSERT_EQ(::pwrite(fd, &header, sizeof(header), 0), static_cast<ssize_t>(sizeof(header)));
  ::close(fd);
  auto removed = remove_stale_segments(dir.path(), SegmentScope::of_job("oldjob"));
  ASSERT_TRUE(removed.is_ok());
  EXPECT_TRUE(removed->empty());
  auto listed = list_segments(dir.path(), SegmentScope::of_job("oldjob"));
  ASSERT_TRUE(listed.is_ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_FALSE((*listed)[0].stale());
  EXPECT_NE((*listed)[0].describe().find("kept: its maker held no lock on it"), std::string::npos)
      << (*listed)[0].describe();
}

// A FIFO under a segment's name (put there by anyone: /dev/shm is world
// writable) is looked at without opening it for reading, so nothing blocks:
// listing, cleaning, creating and mapping all answer at once.
TEST(HostShm, AFifoUnderASegmentNameNeverBlocks) {
  ScratchDir dir;
  const std::string name = segment_name("fifojob", kPart, "layer1");
  ASSERT_EQ(::mkfifo((dir.path() + "/" + name).c_str(), 0600), 0);
  PosixSharedMemory memory({.root_dir = dir.path()});
  const auto start = std::chrono::steady_clock::now();

  auto listed = list_segments(dir.path(), SegmentScope::of_job("fifojob"));
  ASSERT_TRUE(listed.is_ok()) << listed.status().to_string();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_FALSE((*listed)[0].stale());
  EXPECT_NE((*listed)[0].describe().find("a FIFO, not a segment: left alone"), std::string::npos);
  auto removed = remove_stale_segments(dir.path(), SegmentScope::of_job("fifojob"));
  ASSERT_TRUE(removed.is_ok());
  EXPECT_TRUE(removed->empty());
  EXPECT_TRUE(fs::exists(dir.path() + "/" + name));

  auto created = memory.create(name, 4096);
  ASSERT_EQ(created.status().code(), ErrorCode::kAlreadyExists);
  EXPECT_NE(created.status().message().find(golden_message("file.not_regular")), std::string::npos) << created.status().message();
  auto mapped = memory.open_read_only(name, 4096);
  ASSERT_EQ(mapped.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(mapped.status().message().find(golden_message("file.not_regular")), std::string::npos) << mapped.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// Cleanup removes segments that carry our header, belong to us and whose
// creator is gone; a file without the header stays however old it is, and
// so does another user's segment.
TEST(HostShm, CleanupLeavesWhatItDidNotMake) {
  ScratchDir dir;
  const std::string notes = dir.path() + "/engramlab-important-notes.txt";
  {
    std::FILE* f = std::fopen(notes.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("not a segment", f);
    std::fclose(f);
  }
  const timespec old_times[2] = {{0, UTIME_OMIT}, {::time(nullptr) - 3600, 0}};
  ::utimensat(AT_FDCWD, notes.c_str(), old_times, 0);
  const std::string theirs = segment_name("theirs", kPart, "layer1");
  leave_segment_from_dead_process(dir.path(), theirs);
  const bool can_chown = ::chown((dir.path() + "/" + theirs).c_str(), 65534, 65534) == 0;

  auto removed = remove_stale_segments(dir.path(), SegmentScope::every_job());
  ASSERT_TRUE(removed.is_ok()) << removed.status().to_string();
  EXPECT_TRUE(fs::exists(notes));
  if (can_chown) {
    EXPECT_TRUE(removed->empty());
    EXPECT_TRUE(fs::exists(dir.path() + "/" + theirs)) << "another uid's segment is that user's to clean";
    auto listed = list_segments(dir.path(), SegmentScope::of_job("theirs"));
    ASSERT_TRUE(listed.is_ok());
    EXPECT_NE((*listed)[0].describe().find("belongs to uid 65534"), std::string::npos) << (*listed)[0].describe();
  }
  auto listed = list_segments(dir.path(), SegmentScope::every_job());
  ASSERT_TRUE(listed.is_ok());
  ASSERT_FALSE(listed->empty());
  EXPECT_EQ((*listed)[0].name, "engramlab-important-notes.txt") << "every job's listing shows a stranger's file too";
  EXPECT_NE((*listed)[0].describe().find("no engramlab header"), std::string::npos);
  EXPECT_EQ(list_segments(dir.path() + "/missing", SegmentScope::every_job()).status().code(), ErrorCode::kNotFound);
}

// Runs `body` in a forked child inside a private mount namespace with a
// 64 MiB tmpfs at `dir`; the child's exit status is the number of failed
// checks and its stderr explains them.
int in_private_64mib_tmpfs(const std::string& dir, int (*body)(const std::string&)) {
  const pid_t child = ::fork();
  if (child == 0) {
    if (::unshare(CLONE_NEWNS) != 0) ::_exit(100);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(101);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64m") != 0) ::_exit(102);
    ::_exit(body(dir));
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200;
}

int check(bool ok, const char* what) {
  if (!ok) std::fprintf(stderr, "check failed: %s\n", what);
  return ok ? 0 : 1;
}

int tmpfs_body(const std::string& dir) {
  int failures = 0;
  PosixSharedMemory memory({.root_dir = dir});
  auto info = memory.info();
  failures += check(info.is_ok() && info->mounted && info->tmpfs_bytes_total == 64 * kMiB, "info total = 64 MiB");

  // Larger than the whole tmpfs: refused before anything is created.
  auto too_big = memory.create(segment_name("small", kPart, "layer1"), 65 * kMiB);
  failures += check(too_big.status().code() == ErrorCode::kResourceExhausted, "65 MiB -> resource_exhausted");
  const std::string m = too_big.status().message();
  std::fprintf(stderr, "65 MiB table: %s\n", too_big.status().to_string().c_str());
  failures += check(m.find(std::to_string(65 * kMiB)) != std::string::npos, "message names the table size");
  failures += check(m.find(std::to_string(64 * kMiB)) != std::string::npos, "message names the tmpfs total");
  failures += check(::access((dir + "/" + segment_name("small", kPart, "layer1")).c_str(), F_OK) != 0,
                    "nothing left behind");

  // Fits the total but not what is free: the page reservation fails cleanly.
  auto first = memory.create(segment_name("small", kPart, "layer1"), 40 * kMiB);
  failures += check(first.is_ok(), "first 40 MiB table fits");
  auto second = memory.create(segment_name("small", kPart, "layer14"), 40 * kMiB);
  std::fprintf(stderr, "second 40 MiB table: %s\n", second.status().to_string().c_str());
  failures += check(second.status().code() == ErrorCode::kResourceExhausted, "second 40 MiB -> resource_exhausted");
  failures += check(second.status().message().find("No space left") != std::string::npos, "ENOSPC named");
  failures += check(::access((dir + "/" + segment_name("small", kPart, "layer14")).c_str(), F_OK) != 0,
                    "the failed segment was unlinked");
  // The first one's pages are really there: touching all of them cannot SIGBUS.
  if (first.is_ok()) {
    for (size_t i = 0; i < (*first)->bytes().size(); i += 4096) (*first)->bytes()[i] = std::byte{1};
  }
  return failures;
}

TEST(HostShm, Real64MiBTmpfsFailsCleanlyAndReportsItsTotal) {
  if (const std::string& why = testing::why_no_private_tmpfs(); !why.empty())
    GTEST_SKIP() << "private mount namespace unavailable: " << why;
  char templ[] = "/tmp/engramlab-tmpfs-XXXXXX";
  const std::string dir = ::mkdtemp(templ);
  const int failures = in_private_64mib_tmpfs(dir, tmpfs_body);
  EXPECT_EQ(failures, 0) << "see the child's stderr above (100-102: namespace/mount setup failed)";
  EXPECT_EQ(entries(dir), 0u) << "the tmpfs was private to the child";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace engram::shm
