// Collectives over TCP (Boost.Asio): a star through each group's leader.
// The world group meets at rank 0's rendezvous (MASTER_ADDR:MASTER_PORT);
// leader and member authenticate each other with MACs over fresh nonces
// (tcp_rendezvous.h), so the job token never crosses the network, and a
// stranger is refused and logged while the job goes on. A split group's
// leader opens its own port and announces it through the parent group. Every wait is bounded: a dead
// peer (EOF/reset) fails every waiting rank of the group with kUnavailable
// naming the dead rank and the step; after a transport failure the group is
// broken for good, as an NCCL communicator is.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/ipc/launch_env.h"
#include "core/backend/collectives.h"

namespace engram::ipc {

struct Frame;

struct TcpCollectivesOptions {
  int rank = -1;
  int world_size = 0;
  std::string master_addr;
  uint16_t master_port = 0;
  std::string job_token;
  std::string job_id;
  std::chrono::milliseconds join_timeout{30000};  // for all ranks to reach the rendezvous / a split
  std::chrono::milliseconds op_timeout{60000};    // for all ranks to reach one collective
  // For one connection to authenticate; the leader holds at most
  // `max_pending_connections` such connections at a time.
  std::chrono::milliseconds handshake_timeout{2000};
  int max_pending_connections = 64;
  // Rank 0 only: a socket already bound to MASTER_ADDR:MASTER_PORT and
  // listening, which the group takes over (and closes), instead of binding
  // the port itself. A launcher (or a test) that binds first hands its ranks
  // a port nobody else can take between its choice and the rendezvous.
  int listen_fd = -1;
};

TcpCollectivesOptions collectives_options(const LaunchEnv& env);

class TcpCollectives final : public Collectives {
 public:
  static Result<std::unique_ptr<TcpCollectives>> join(const TcpCollectivesOptions& options);
  ~TcpCollectives() override;

  int rank() const override { return group_rank_; }
  int size() const override { return static_cast<int>(world_ranks_.size()); }
  int world_rank() const override { return world_ranks_[static_cast<size_t>(group_rank_)]; }

  Status all_gather(std::span<const std::byte> mine, std::span<std::byte> all) override;
  Status reduce_scatter_sum_bf16(std::span<const uint16_t> input, std::span<uint16_t> output) override;
  Status all_to_all(std::span<const std::byte> send, std::span<std::byte> receive) override;
  Status barrier() override;
  Result<std::unique_ptr<Collectives>> split(int color, int key) override;

  // The address each group rank reached its leader from (the leader's: the
  // one it listens on).
  const std::vector<std::string>& addresses() const { return addresses_; }
  // Connections the leader refused or dropped (no valid proof of the token,
  // a wrong claim, a handshake past its deadline): logged too.
  int refused_connections() const { return refused_connections_; }

  struct Impl;

 private:
  // join's and split's bodies; those turn what Boost.Asio throws (EMFILE) into a Status.
  static Result<std::unique_ptr<TcpCollectives>> join_unguarded(const TcpCollectivesOptions& options);
  Result<std::unique_ptr<Collectives>> split_unguarded(int color, int key);
  // One collective call: which op, its step name for errors, its sequence number.
  struct Round {
    uint32_t op = 0;
    const char* step = "";
    uint64_t seq = 0;
    std::string where;  // "all_gather #7"
  };

  TcpCollectives();
  // Every rank's bytes through the leader, and this rank's result back.
  Result<std::vector<std::byte>> round(uint32_t op, const char* step, std::span<const std::byte> mine,
                                       size_t expected_result_bytes);
  Result<std::vector<std::byte>> round_as_member(const Round& round, std::span<const std::byte> mine);
  Result<std::vector<std::byte>> round_as_leader(const Round& round, std::span<const std::byte> mine);
  Status gather_member_inputs(const Round& round, std::chrono::steady_clock::time_point deadline,
                              std::vector<Frame>& frames);
  Status send_replies(const Round& round, const Status& error, std::vector<std::vector<std::byte>>& outputs,
                      std::chrono::steady_clock::time_point deadline);
  Result<std::vector<std::vector<std::byte>>> compute_outputs(const Round& round,
                                                             const std::vector<std::span<const std::byte>>& inputs) const;
  // Marks the group broken for good (as an NCCL communicator after a
  // transport failure), closes every link and returns `why`.
  Status break_group(Status why);

  TcpCollectivesOptions options_;
  int group_rank_ = 0;
  std::vector<int> world_ranks_;       // by group rank
  std::vector<std::string> addresses_;  // by group rank
  std::string tag_;                     // names this group in handshakes
  uint64_t seq_ = 0;
  uint64_t splits_ = 0;
  Status broken_;
  int refused_connections_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace engram::ipc
