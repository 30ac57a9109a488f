// Emulated fd passing: works between processes of one host identity, fails
// across hosts as the real socket does, and never hangs on a peer that is gone.
#include "sim/sim_fd_channel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/base/units.h"
#include "sim/world.h"

namespace engram::sim {
namespace {

using ::testing::HasSubstr;

HostSpec host(std::string name, int gpus, std::string boot_id = "") {
  HostSpec h;
  h.name = std::move(name);
  h.boot_id = std::move(boot_id);
  h.gpu_count = gpus;
  return h;
}

// Rank 0 exports 2 MiB and sends the fd to rank 1, which imports it and
// reads what rank 0 wrote.
Status send_and_import(RankBackend& b) {
  DeviceMemory& d = *b.device;
  if (b.world_rank == 0) {
    ENGRAM_ASSIGN_OR_RETURN(AllocationHandle h, d.create(2 * kMiB, HandleType::kPosixFd));
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr base, d.reserve(2 * kMiB));
    ENGRAM_RETURN_IF_ERROR(d.map(base, 2 * kMiB, h));
    ENGRAM_RETURN_IF_ERROR(d.set_access(base, 2 * kMiB));
    std::array<std::byte, 3> hello{std::byte{'h'}, std::byte{'i'}, std::byte{'!'}};
    ENGRAM_RETURN_IF_ERROR(d.copy_to_device(base + 100, hello));
    ENGRAM_ASSIGN_OR_RETURN(ShareableHandle fd, d.export_handle(h, HandleType::kPosixFd));
    std::array<std::byte, 2> header{std::byte{7}, std::byte{9}};
    Status sent = b.fds->send_fd(1, fd.fd, header);
    ENGRAM_RETURN_IF_ERROR(d.close_fd(fd.fd));
    Status done = b.world->barrier();
    ENGRAM_RETURN_IF_ERROR(d.unmap(base, 2 * kMiB));
    ENGRAM_RETURN_IF_ERROR(d.free_reservation(base, 2 * kMiB));
    ENGRAM_RETURN_IF_ERROR(d.release(h));
    ENGRAM_RETURN_IF_ERROR(sent);
    return done;
  }
  Status result = [&]() -> Status {
    ENGRAM_ASSIGN_OR_RETURN(ReceivedFd got, b.fds->recv_fd(0));
    if (got.header.size() != 2 || got.header[1] != std::byte{9}) return internal_error("header lost");
    ShareableHandle handle;
    handle.fd = got.fd;
    auto imported = d.import_handle(handle);
    ENGRAM_RETURN_IF_ERROR(d.close_fd(got.fd));
    if (!imported.is_ok()) return imported.status();
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr base, d.reserve(2 * kMiB));
    ENGRAM_RETURN_IF_ERROR(d.map(base, 2 * kMiB, *imported));
    ENGRAM_RETURN_IF_ERROR(d.set_access(base, 2 * kMiB));
    std::array<std::byte, 3> seen{};
    ENGRAM_RETURN_IF_ERROR(d.copy_from_device(seen, base + 100));
    ENGRAM_RETURN_IF_ERROR(d.unmap(base, 2 * kMiB));
    ENGRAM_RETURN_IF_ERROR(d.free_reservation(base, 2 * kMiB));
    ENGRAM_RETURN_IF_ERROR(d.release(*imported));
    if (seen[2] != std::byte{'!'}) return internal_error("imported memory differs");
    return Status::ok();
  }();
  Status done = b.world->barrier();
  ENGRAM_RETURN_IF_ERROR(result);
  return done;
}

TEST(SimFdChannel, FdAndHeaderPassWithinOneHostAndTheImportSeesTheMemory) {
  WorldSpec spec;
  spec.hosts = {host("b300-0", 2)};
  auto run = run_world(spec, send_and_import);
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty()) << Ledger::format(run->leaks);
}

TEST(SimFdChannel, TwoContainersWithOneHostIdentityPassFds) {
  WorldSpec spec;
  spec.hosts = {host("node-7", 1, "boot-x"), host("node-7", 1, "boot-x")};  // two containers, one kernel
  auto run = run_world(spec, send_and_import);
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
}

TEST(SimFdChannel, AcrossHostsTheSendFailsLikeTheRealSocket) {
  for (auto hosts : {std::vector<HostSpec>{host("a", 1), host("b", 1)},
                     // Same hostname, another boot: a different machine (or a reboot).
                     std::vector<HostSpec>{host("same", 1, "boot-1"), host("same", 1, "boot-2")}}) {
    WorldSpec spec;
    spec.hosts = hosts;
    auto run = run_world(spec, send_and_import);
    ASSERT_TRUE(run.is_ok());
    const Status& s = run->statuses[0];
    EXPECT_EQ(s.code(), ErrorCode::kUnavailable) << s.to_string();
    EXPECT_EQ(s.context().step, "send");
    EXPECT_EQ(s.context().peer, 1);
    EXPECT_THAT(s.message(), HasSubstr("No such file or directory"));
    EXPECT_THAT(s.message(), HasSubstr(fd_socket_path(1)));
    EXPECT_EQ(run->coverage.count("sim: fd send across hosts refused"), 1u);
    // The receiver waits out its timeout (the sender, in its barrier,
    // neither sends nor exits): no hang.
    EXPECT_EQ(run->statuses[1].code(), ErrorCode::kDeadlineExceeded) << run->statuses[1].to_string();
    EXPECT_THAT(run->statuses[1].message(), HasSubstr("no fd from rank 0 within 60 s"));
    EXPECT_TRUE(run->leaks.empty()) << Ledger::format(run->leaks);
  }
}

TEST(SimFdChannel, ReceivingFromARankThatNeverSendsFailsInsteadOfHanging) {
  WorldSpec spec;
  spec.hosts = {host("h", 2)};
  auto run = run_world(spec, [](RankBackend& b) -> Status {
    auto got = b.fds->recv_fd(1 - b.world_rank);  // both wait: nobody can make progress
    return got.is_ok() ? internal_error("received an fd nobody sent") : got.status();
  });
  ASSERT_TRUE(run.is_ok());
  for (const Status& s : run->statuses) {
    EXPECT_EQ(s.code(), ErrorCode::kDeadlineExceeded) << s.to_string();
    EXPECT_EQ(s.context().step, "receive");
    EXPECT_THAT(s.message(), HasSubstr("within 60 s of simulated time"));
  }
  EXPECT_EQ(run->end_time_us, 60'000'000u);
}

TEST(SimFdChannel, InjectedSendFaultNamesPeerAndStep) {
  WorldSpec spec;
  spec.hosts = {host("h", 2)};
  spec.faults.plan(FaultSite::kSend, 0);
  auto run = run_world(spec, send_and_import);
  ASSERT_TRUE(run.is_ok());
  EXPECT_EQ(run->statuses[0].context().step, "send");
  EXPECT_EQ(run->statuses[0].context().peer, 1);
  EXPECT_EQ(run->faults.fired(FaultSite::kSend), 1u);
  EXPECT_TRUE(run->leaks.empty()) << Ledger::format(run->leaks);
}

}  // namespace
}  // namespace engram::sim
