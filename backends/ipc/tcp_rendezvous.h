// How a rank joins its group's leader over TCP, and how the leader admits
// its members, with mutual authentication that never sends the job token:
//
//   member -> leader  member nonce                  (nothing job-specific)
//   leader -> member  leader nonce, MAC(token; "leader", job id, group, both nonces)
//   member            checks the leader's MAC; a leader that fails it is
//                     refused before the member says who it is
//   member -> leader  its claim (group, job id, ranks, address), MAC(token; "member", nonces, claim)
//   leader -> member  the group table, MAC(token; "welcome", nonces, table) -- once all joined
//                     or a refusal naming why (a claim that does not fit)
//
// The leader holds at most `max_pending_connections` connections that have
// not authenticated, each for at most `handshake_timeout`; when full it drops
// the oldest silent one first, so a flood of idle connections costs it a
// bounded number of fds and cannot keep a member out. A member whose
// connection closes before the welcome tries again until its deadline.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "backends/ipc/tcp_frames.h"
#include "core/base/status.h"

namespace engram::ipc {

struct GroupTable {
  std::vector<int32_t> world_ranks;     // by group rank
  std::vector<std::string> addresses;   // the address each group rank reached its leader from
};

struct RendezvousSettings {
  std::string tag;        // names the group: "world", "world/split1:0", ...
  std::string job_id;
  std::string job_token;
  Clock::time_point deadline;                          // for the whole rendezvous
  std::chrono::milliseconds join_timeout{30000};       // what `deadline` came from, for messages
  std::chrono::milliseconds handshake_timeout{2000};   // per connection, until it authenticates
  int max_pending_connections = 64;
};

// Leader: accepts until every other group rank has authenticated and
// claimed its place, then welcomes them all. `links` and `addresses` are
// indexed by group rank ([0] is the leader's own, left as is). `refused`
// counts connections that were turned away or dropped (logged, the wait
// goes on).
Status admit_members(asio::io_context& io, tcp::acceptor& acceptor, const RendezvousSettings& settings,
                     const std::vector<int>& world_ranks, std::vector<std::unique_ptr<tcp::socket>>& links,
                     std::vector<std::string>& addresses, int& refused);

struct MemberClaim {
  int32_t world_rank = -1;
  int32_t group_rank = -1;
  int32_t group_size = 0;
};

// Member: connects (retrying while the leader is not up yet), authenticates
// the leader, claims its place and waits for the welcome.
Result<GroupTable> join_leader(asio::io_context& io, const std::string& host, uint16_t port,
                               const RendezvousSettings& settings, const MemberClaim& claim, int leader_world_rank,
                               std::unique_ptr<tcp::socket>& link);

}  // namespace engram::ipc
