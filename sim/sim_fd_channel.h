// Emulated fd passing (SCM_RIGHTS over a per-rank Unix socket). Works only
// between ranks of one host identity (hostname + boot id); to a rank on
// another host the socket path does not exist, and the send fails as the real
// one does, with "No such file or directory" and the path.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/backend/fd_channel.h"
#include "sim/sim_device_memory.h"

namespace engram::sim {

// The socket path rank `rank` listens on (what the real backend would use).
std::string fd_socket_path(int rank);

class FdWorld {
 public:
  FdWorld(DeviceWorld& devices, SimTimeUs receive_timeout_us);

  struct Message {
    int from = -1;
    uint64_t file = 0;
    std::vector<std::byte> header;
    uint64_t ledger_id = 0;
  };
  // The socket of `rank` closes (its process died): fds still in flight to
  // it are closed with it.
  void close_channel(int rank);
  bool channel_closed(int rank) const { return closed_[static_cast<size_t>(rank)]; }
  size_t in_flight() const;

 private:
  DeviceWorld& devices_;
  SimContext& context_;
  std::map<std::pair<int, int>, std::deque<Message>> queues_;  // (to, from) -> messages
  std::vector<bool> closed_;
  SimTimeUs receive_timeout_us_;

  friend class SimFdChannel;
};

class SimFdChannel final : public FdChannel {
 public:
  SimFdChannel(FdWorld& world, int rank);
  Status send_fd(int peer_rank, int fd, std::span<const std::byte> header) override;
  Result<ReceivedFd> recv_fd(int peer_rank) override;

 private:
  FdWorld& world_;
  SimContext& context_;
  int rank_;
};

}  // namespace engram::sim
