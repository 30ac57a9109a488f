// SGLang's test_exchange_posix_fds_joins_late_receiver_and_closes_fd with its
// timings, on the real Unix-socket channel and a real memfd: a send whose
// receiver has no socket yet gives up after its 0.02 s send timeout naming
// the peer; the exporter closes its fd (as the handle exchange does after any
// send); the receiver, released 0.08 s later, sees a clear error rather than
// a stray fd; /proc/self/fd is back at its baseline.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "backends/ipc/unix_fd_channel.h"
#include "backends/memfd/memfd_device_memory.h"
#include "tests/open_fd_count.h"

namespace engram {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

using testing::open_fd_count;

ipc::FdChannelOptions options_for(int rank, const std::string& dir, std::chrono::milliseconds deadline) {
  ipc::FdChannelOptions o;
  o.rank = rank;
  o.world_size = 2;
  o.job_id = "latefd" + std::to_string(::getpid());
  o.job_token = "token-for-the-late-receiver-test";
  o.socket_dir = dir;
  o.deadline = deadline;
  o.peer_socket_wait = std::chrono::milliseconds(20);  // the send timeout
  return o;
}

TEST(LateFdReceiver, ASendThatTimesOutNamesThePeerAndTheLateReceiverSeesAClearError) {
  char templ[] = "/tmp/engramlab-latefd-XXXXXX";
  const std::string dir = ::mkdtemp(templ);
  const std::string socket_dir = dir + "/sock";
  const int baseline = open_fd_count();
  {
    memfd::MemfdDeviceMemory device;
    auto allocation = device.create(2 << 20, HandleType::kPosixFd);
    ASSERT_TRUE(allocation.is_ok()) << allocation.status().to_string();
    auto exported = device.export_handle(*allocation, HandleType::kPosixFd);
    ASSERT_TRUE(exported.is_ok()) << exported.status().to_string();

    // The deadline is far beyond the send timeout, so a send that gives up
    // before it gave up on the timeout.
    auto sender = ipc::UnixFdChannel::open(options_for(0, socket_dir, std::chrono::milliseconds(60'000)));
    ASSERT_TRUE(sender.is_ok()) << sender.status().to_string();
    const auto started = Clock::now();
    const std::byte header[4] = {};
    const Status sent = (*sender)->send_fd(1, exported->fd, header);
    const auto waited = Clock::now() - started;
    EXPECT_EQ(sent.code(), ErrorCode::kUnavailable) << sent.to_string();
    EXPECT_EQ(sent.context().rank, 0);
    EXPECT_EQ(sent.context().peer, 1);
    EXPECT_EQ(sent.context().step, "send");
    EXPECT_THAT(sent.message(), HasSubstr("cannot send an fd to rank 1: no socket"));
    EXPECT_THAT(sent.message(), HasSubstr("rank-1.sock"));
    EXPECT_GE(waited, std::chrono::milliseconds(20));
    EXPECT_LT(waited, std::chrono::seconds(30));
    // The exporter's fd is closed on the failed send, as the exchange does.
    EXPECT_TRUE(device.close_fd(exported->fd).is_ok());

    // The receiver comes after the send gave up (it returned above).
    auto receiver = ipc::UnixFdChannel::open(options_for(1, socket_dir, std::chrono::milliseconds(50)));
    ASSERT_TRUE(receiver.is_ok()) << receiver.status().to_string();
    auto got = (*receiver)->recv_fd(0);
    ASSERT_FALSE(got.is_ok()) << "a late receiver got an fd the sender had given up on";
    EXPECT_EQ(got.status().code(), ErrorCode::kUnavailable) << got.status().to_string();
    EXPECT_EQ(got.status().context().peer, 0);
    EXPECT_THAT(got.status().message(), HasSubstr("for an fd from rank 0; none came"));
    EXPECT_TRUE(device.release(*allocation).is_ok());
    EXPECT_EQ(device.live_counts(), memfd::MemfdLiveCounts{});
  }
  EXPECT_EQ(open_fd_count(), baseline);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace engram
