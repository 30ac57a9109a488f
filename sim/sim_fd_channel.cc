#include "sim/sim_fd_channel.h"

#include <fmt/format.h>

#include <limits>

namespace engram::sim {

std::string fd_socket_path(int rank) { return fmt::format("/tmp/engramlab/fd-rank-{}.sock", rank); }

namespace {
// What a receiver parks on until `sender`'s fd reaches it.
Scheduler::WaitKey fd_queue_key(int receiver, int sender) {
  return Scheduler::wait_key(Scheduler::KeySpace::kFdQueue, static_cast<uint64_t>(receiver),
                             static_cast<uint64_t>(sender));
}
}  // namespace

FdWorld::FdWorld(DeviceWorld& devices, SimTimeUs receive_timeout_us)
    : devices_(devices),
      context_(devices.context()),
      closed_(static_cast<size_t>(context_.rank_count()), false),
      receive_timeout_us_(receive_timeout_us) {
  ENGRAM_CHECK(receive_timeout_us > 0);
}

void FdWorld::close_channel(int rank) {
  closed_[static_cast<size_t>(rank)] = true;
  // Queues are keyed (to, from): this rank's are one contiguous range.
  const auto end = queues_.lower_bound({rank + 1, std::numeric_limits<int>::min()});
  for (auto it = queues_.lower_bound({rank, std::numeric_limits<int>::min()}); it != end;) {
    for (Message& m : it->second) {
      context_.ledger().remove(ResourceKind::kInFlightFd, m.ledger_id);
      devices_.drop_file_reference(m.file);
      coverage_probe<"sim: fd in flight closed with its receiver's socket">();
      ENGRAM_TRACE(context_.scheduler(), "drop_fd r{} <- r{}", rank, m.from);
    }
    it = queues_.erase(it);
  }
}

size_t FdWorld::in_flight() const {
  size_t n = 0;
  for (const auto& [key, q] : queues_) n += q.size();
  return n;
}

SimFdChannel::SimFdChannel(FdWorld& world, int rank) : world_(world), context_(world.context_), rank_(rank) {
  ENGRAM_CHECK(rank >= 0 && rank < context_.rank_count());
}

Status SimFdChannel::send_fd(int peer_rank, int fd, std::span<const std::byte> header) {
  auto fail = [&](ErrorCode code, std::string message) {
    return Status(code, std::move(message), {rank_, peer_rank, "send"});
  };
  switch (context_.visit(FaultSite::kSend, rank_)) {
    case SimContext::Visit::kDied: return context_.dead_status(rank_, "send");
    case SimContext::Visit::kFault:
      return fail(ErrorCode::kUnavailable,
                  fmt::format("sendmsg(SCM_RIGHTS) to {}: ECONNRESET: Connection reset by peer (injected fault, "
                              "site send)",
                              fd_socket_path(peer_rank)));
    case SimContext::Visit::kProceed: break;
  }
  if (peer_rank < 0 || peer_rank >= context_.rank_count())
    return fail(ErrorCode::kInvalidArgument,
                fmt::format("send_fd: peer rank {} is outside [0, {})", peer_rank, context_.rank_count()));
  if (!context_.same_host(rank_, peer_rank)) {
    coverage_probe<"sim: fd send across hosts refused">();
    const HostSpec& mine = context_.host_of(rank_);
    const HostSpec& theirs = context_.host_of(peer_rank);
    return fail(ErrorCode::kUnavailable,
                fmt::format("connect({}): No such file or directory: rank {} runs on host {} (boot {}), this rank "
                            "on host {} (boot {}); file descriptors pass only between processes of one host",
                            fd_socket_path(peer_rank), peer_rank, theirs.name, theirs.boot_id, mine.name,
                            mine.boot_id));
  }
  if (world_.channel_closed(peer_rank) || context_.scheduler().rank_finished(peer_rank))
    return fail(ErrorCode::kUnavailable,
                fmt::format("connect({}): ECONNREFUSED: Connection refused (rank {} has exited)",
                            fd_socket_path(peer_rank), peer_rank));
  uint64_t file = world_.devices_.file_of(rank_, fd);
  if (file == 0)
    return fail(ErrorCode::kInvalidArgument, fmt::format("sendmsg(SCM_RIGHTS, fd {}): EBADF: Bad file descriptor", fd));
  // The message holds its own reference, as the kernel does for an fd in flight.
  world_.devices_.add_file_reference(file);
  const uint64_t ledger_id =
      context_.ledger().add(ResourceKind::kInFlightFd, peer_rank, 0, LedgerDetail::of_rank(rank_));
  world_.queues_[{peer_rank, rank_}].push_back(
      FdWorld::Message{rank_, file, std::vector<std::byte>(header.begin(), header.end()), ledger_id});
  ENGRAM_TRACE(context_.scheduler(), "send_fd r{} -> r{}", rank_, peer_rank);
  context_.scheduler().notify(fd_queue_key(peer_rank, rank_));
  return Status::ok();
}

Result<ReceivedFd> SimFdChannel::recv_fd(int peer_rank) {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, "receive");
  auto fail = [&](ErrorCode code, std::string message) {
    return Status(code, std::move(message), {rank_, peer_rank, "receive"});
  };
  if (peer_rank < 0 || peer_rank >= context_.rank_count())
    return fail(ErrorCode::kInvalidArgument,
                fmt::format("recv_fd: peer rank {} is outside [0, {})", peer_rank, context_.rank_count()));
  auto& queue = world_.queues_[{rank_, peer_rank}];
  auto arrived_or_gone = [&] {
    return !queue.empty() || context_.is_dead(peer_rank) || context_.scheduler().rank_finished(peer_rank);
  };
  Scheduler& scheduler = context_.scheduler();
  // A send to this rank, the sender's exit, or (notify_all) its death wakes it.
  const Scheduler::Wake wake =
      scheduler.wait_until(arrived_or_gone, scheduler.now_us() + world_.receive_timeout_us_,
                           {fd_queue_key(rank_, peer_rank), Scheduler::finished_key(peer_rank)});
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, "receive");
  if (queue.empty()) {
    world_.queues_.erase({rank_, peer_rank});
    if (wake == Scheduler::Wake::kTimedOut)
      return fail(ErrorCode::kDeadlineExceeded,
                  fmt::format("recvmsg on {}: no fd from rank {} within {:.3g} s of simulated time (it is hung, "
                              "dead or slower than the timeout)",
                              fd_socket_path(rank_), peer_rank,
                              static_cast<double>(world_.receive_timeout_us_) / 1e6));
    if (wake == Scheduler::Wake::kStuck)
      return fail(ErrorCode::kUnavailable,
                  fmt::format("recvmsg on {}: waiting for an fd from rank {} with no deadline, and no rank can make "
                              "progress",
                              fd_socket_path(rank_), peer_rank));
    return fail(ErrorCode::kUnavailable,
                fmt::format("recvmsg on {}: rank {} {} before sending its fd", fd_socket_path(rank_), peer_rank,
                            context_.is_dead(peer_rank) ? "died" : "exited"));
  }
  FdWorld::Message message = std::move(queue.front());
  queue.pop_front();
  if (queue.empty()) world_.queues_.erase({rank_, peer_rank});
  context_.ledger().remove(ResourceKind::kInFlightFd, message.ledger_id);
  uint64_t physical_id = world_.devices_.physical_of_file(message.file);
  const DeviceWorld::Physical* p = world_.devices_.physical(physical_id);
  ReceivedFd out;
  out.fd = world_.devices_.install_fd(rank_, message.file, /*received=*/true, p ? p->bytes : 0);
  world_.devices_.drop_file_reference(message.file);  // the message's reference moved into the fd table
  out.header = std::move(message.header);
  ENGRAM_TRACE(context_.scheduler(), "recv_fd r{} <- r{}", rank_, peer_rank);
  return out;
}

}  // namespace engram::sim
