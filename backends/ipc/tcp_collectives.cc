#include "backends/ipc/tcp_collectives.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "backends/ipc/fd_limit.h"
#include "backends/ipc/tcp_frames.h"
#include "backends/ipc/tcp_rendezvous.h"
#include "backends/ipc/wire.h"
#include "core/base/text_list.h"

namespace engram::ipc {
namespace {

// What one member's input to a round (or its result) may carry. Buffers
// grow as bytes arrive, so this bounds a stream, not an allocation up front.
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 36;
constexpr uint64_t kMaxStepBytes = 1024;
constexpr uint64_t kMaxErrorMessageBytes = uint64_t{1} << 20;
// code, peer, and the two length-prefixed strings of encode_error.
constexpr uint64_t kMaxErrorFrameBytes = 1 + 4 + (4 + kMaxStepBytes) + (4 + kMaxErrorMessageBytes);

// A member's input, by op: a barrier carries nothing, a split its
// (color, key) or its port. Any other kind with a payload breaks the stream.
const PayloadLimits kMemberInputLimits{{{kOpAllGather, kMaxPayloadBytes},
                                        {kOpReduceScatter, kMaxPayloadBytes},
                                        {kOpAllToAll, kMaxPayloadBytes},
                                        {kOpBarrier, 0},
                                        {kOpSplit, 2 * sizeof(int32_t)}},
                                       0};
const PayloadLimits kLeaderReplyLimits{{{kResult, kMaxPayloadBytes}, {kError, kMaxErrorFrameBytes}}, 0};
// A member waits this much longer than its leader, so the leader's
// explanation of a failed round arrives before the member gives up.
constexpr auto kMemberGrace = std::chrono::milliseconds(1000);
constexpr auto kReplyGrace = std::chrono::milliseconds(1000);

std::vector<std::byte> encode_error(const Status& status, const std::string& step) {
  ByteWriter w;
  w.put<uint8_t>(static_cast<uint8_t>(status.code()));
  w.put<int32_t>(status.context().peer);
  w.put_string(step);
  w.put_string(status.message());
  return std::move(w.bytes());
}

Status decode_error(const std::vector<std::byte>& payload, int my_world_rank, int leader_world_rank) {
  ByteReader r(payload.data(), payload.size());
  auto code = r.get<uint8_t>();
  auto peer = r.get<int32_t>();
  auto step = r.get_string(kMaxStepBytes);
  auto message = r.get_string(kMaxErrorMessageBytes);
  if (!code || !peer || !step || !message || *code == 0 || *code > static_cast<uint8_t>(ErrorCode::kInternal)) {
    return Status(ErrorCode::kInternal, "the leader sent a malformed error frame",
                  {.rank = my_world_rank, .peer = leader_world_rank, .step = ""});
  }
  return Status(static_cast<ErrorCode>(*code), "reported by rank " + std::to_string(leader_world_rank) + ": " + *message,
                {.rank = my_world_rank, .peer = *peer, .step = *step});
}

RendezvousSettings rendezvous_settings(const TcpCollectivesOptions& options, const std::string& tag,
                                       Clock::time_point deadline) {
  RendezvousSettings s;
  s.tag = tag;
  s.job_id = options.job_id;
  s.job_token = options.job_token;
  s.deadline = deadline;
  s.join_timeout = options.join_timeout;
  s.handshake_timeout = std::min(options.handshake_timeout, options.join_timeout);
  s.max_pending_connections = options.max_pending_connections;
  return s;
}

// Rank 0 takes over the listening socket it was handed (options.listen_fd).
Status listen_on_handed_socket(const TcpCollectivesOptions& options, tcp::acceptor& acceptor, std::string& address) {
  error_code ec;
  acceptor.assign(tcp::v4(), options.listen_fd, ec);
  const tcp::endpoint endpoint = ec ? tcp::endpoint() : acceptor.local_endpoint(ec);
  if (ec) {
    return Status(ErrorCode::kInvalidArgument,
                  "rank 0 cannot listen on the socket it was handed (listen_fd " + std::to_string(options.listen_fd) +
                      "): " + ec.message() + " (hand it an IPv4 TCP socket that is bound and listening)",
                  {.rank = 0, .step = "rendezvous"});
  }
  address = endpoint.address().to_string();
  return Status::ok();
}

// Rank 0 listens on MASTER_ADDR:MASTER_PORT.
Status listen_on_master(const TcpCollectivesOptions& options, tcp::acceptor& acceptor, std::string& address) {
  if (options.listen_fd >= 0) return listen_on_handed_socket(options, acceptor, address);
  tcp::resolver resolver(acceptor.get_executor());
  error_code ec;
  auto endpoints = resolver.resolve(options.master_addr, std::to_string(options.master_port), ec);
  if (ec || endpoints.empty()) {
    return Status(ErrorCode::kInvalidArgument, "cannot resolve MASTER_ADDR '" + options.master_addr + "': " + ec.message(),
                  {.rank = 0, .step = "rendezvous"});
  }
  const tcp::endpoint endpoint = *endpoints.begin();
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status(ErrorCode::kUnavailable,
                  "rank 0 cannot listen on MASTER_ADDR:MASTER_PORT = " + options.master_addr + ":" +
                      std::to_string(options.master_port) + ": " + ec.message() +
                      " (MASTER_ADDR must be an address of rank 0's host and MASTER_PORT a free port)",
                  {.rank = 0, .step = "rendezvous"});
  }
  address = endpoint.address().to_string();
  return Status::ok();
}

// A split group's leader listens on an ephemeral port of the address it
// reached its own leader from; 0 when it cannot.
// The split leader's port; 0 when it could not listen, with `ec` saying why
// (EMFILE/ENFILE: out of file descriptors, which the split names).
int32_t listen_for_split(tcp::acceptor& acceptor, const std::string& address_text, error_code& ec) {
  const auto address = asio::ip::make_address(address_text, ec);
  if (!ec) acceptor.open(tcp::endpoint(address, 0).protocol(), ec);
  if (!ec) acceptor.bind(tcp::endpoint(address, 0), ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  return ec ? 0 : acceptor.local_endpoint().port();
}

bool out_of_fds(const error_code& ec) { return ec.value() == EMFILE || ec.value() == ENFILE; }

}  // namespace

struct TcpCollectives::Impl {
  asio::io_context io;
  // Leader: one link per group rank ([0] empty). Member: [0] is the leader.
  std::vector<std::unique_ptr<tcp::socket>> links;

  void close_all() {
    for (auto& link : links) {
      if (link && link->is_open()) {
        error_code ignored;
        link->shutdown(tcp::socket::shutdown_both, ignored);
        link->close(ignored);
      }
    }
  }
  void cancel_all() {
    for (auto& link : links)
      if (link) link->cancel();
  }
};

TcpCollectivesOptions collectives_options(const LaunchEnv& env) {
  TcpCollectivesOptions o;
  o.rank = env.rank;
  o.world_size = env.world_size;
  o.master_addr = env.master_addr;
  o.master_port = env.master_port;
  o.job_token = env.job_token;
  o.job_id = env.job_id;
  return o;
}

TcpCollectives::TcpCollectives() : impl_(std::make_unique<Impl>()) {}
TcpCollectives::~TcpCollectives() { impl_->close_all(); }

Result<std::unique_ptr<TcpCollectives>> TcpCollectives::join(const TcpCollectivesOptions& options) {
  const std::string what = fmt::format("rank {} joining the job's collectives", options.rank);
  return without_asio_exceptions(what, [&] { return join_unguarded(options); });
}

Result<std::unique_ptr<TcpCollectives>> TcpCollectives::join_unguarded(const TcpCollectivesOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return invalid_argument("collectives: rank " + std::to_string(options.rank) + " outside world size " +
                            std::to_string(options.world_size));
  }
  if (options.job_token.empty()) return invalid_argument("collectives: empty job token (ENGRAMLAB_JOB_TOKEN)");
  if (options.max_pending_connections < 1) {
    return invalid_argument("collectives: max_pending_connections must be at least 1");
  }
  std::unique_ptr<TcpCollectives> group(new TcpCollectives());
  group->options_ = options;
  group->group_rank_ = options.rank;
  group->tag_ = "world";
  for (int r = 0; r < options.world_size; ++r) group->world_ranks_.push_back(r);
  group->addresses_.assign(static_cast<size_t>(options.world_size), "");
  if (options.world_size == 1) {
    group->addresses_[0] = options.master_addr;
    return group;
  }
  auto& impl = *group->impl_;
  const RendezvousSettings settings = rendezvous_settings(options, group->tag_, Clock::now() + options.join_timeout);
  if (options.rank == 0) {
    // One socket per member, an epoll set, an eventfd and a timerfd: known
    // now, so a short limit is named before any member is turned away.
    ENGRAM_RETURN_IF_ERROR(check_fds_available(
        static_cast<uint64_t>(options.world_size - 1) + 4,
        fmt::format("rank 0 (the rendezvous leader of {} ranks: one socket per member)", options.world_size)));
    tcp::acceptor acceptor(impl.io);
    ENGRAM_RETURN_IF_ERROR(listen_on_master(options, acceptor, group->addresses_[0]));
    impl.links.resize(static_cast<size_t>(options.world_size));
    ENGRAM_RETURN_IF_ERROR(admit_members(impl.io, acceptor, settings, group->world_ranks_, impl.links,
                                         group->addresses_, group->refused_connections_));
    return group;
  }
  impl.links.resize(1);
  const MemberClaim claim{options.rank, options.rank, options.world_size};
  ENGRAM_ASSIGN_OR_RETURN(GroupTable table, join_leader(impl.io, options.master_addr, options.master_port, settings,
                                                        claim, 0, impl.links[0]));
  group->addresses_ = std::move(table.addresses);
  return group;
}

Result<std::vector<std::byte>> TcpCollectives::round(uint32_t op, const char* step, std::span<const std::byte> mine,
                                                     size_t expected_result_bytes) {
  if (!broken_.is_ok()) return broken_;
  Round r{op, step, ++seq_, ""};
  r.where = fmt::format("{} #{}", step, r.seq);

  std::vector<std::byte> result;
  if (size() == 1) {
    ENGRAM_ASSIGN_OR_RETURN(auto outputs, compute_outputs(r, {mine}));
    result = std::move(outputs[0]);
  } else if (group_rank_ != 0) {
    ENGRAM_ASSIGN_OR_RETURN(result, round_as_member(r, mine));
  } else {
    ENGRAM_ASSIGN_OR_RETURN(result, round_as_leader(r, mine));
  }
  if (result.size() != expected_result_bytes) {
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("{} produced {} bytes for a {}-byte output buffer", step, result.size(),
                              expected_result_bytes),
                  {.rank = world_rank(), .step = step});
  }
  return result;
}

// Member: send our bytes, then wait for the result or the leader's error.
Result<std::vector<std::byte>> TcpCollectives::round_as_member(const Round& r, std::span<const std::byte> mine) {
  const int me = world_rank();
  const int leader = world_ranks_[0];
  auto& impl = *impl_;
  tcp::socket& link = *impl.links[0];

  const Frame out = make_frame(r.op, r.seq, me, std::vector<std::byte>(mine.begin(), mine.end()));
  Frame in;
  int pending = 2;
  error_code write_ec, read_ec;
  async_write_frame(link, out, [&](error_code e) {
    write_ec = e;
    --pending;
  });
  async_read_frame(link, in, kLeaderReplyLimits, [&](error_code e) {
    read_ec = e;
    --pending;
  });
  const bool answered = run_bounded(impl.io, Clock::now() + options_.op_timeout + kMemberGrace, pending);

  if (answered && is_oversized_frame(read_ec)) {
    return break_group(Status(ErrorCode::kInternal,
                              fmt::format("protocol error: rank {} (leader of group '{}') sent {} during {}; it runs "
                                          "another engramlab build or the stream is corrupt, and this group cannot "
                                          "continue",
                                          leader, tag_, oversized_frame_text(in.header, kLeaderReplyLimits), r.where),
                              {.rank = me, .peer = leader, .step = r.step}));
  }
  // A write that failed after the leader's error arrived still lets us read it.
  if (!answered || read_ec || (write_ec && in.header.kind != kError)) {
    const std::string why = !answered ? fmt::format("no answer within {} ms", (options_.op_timeout + kMemberGrace).count())
                                      : "the connection closed (" + describe_ec(read_ec ? read_ec : write_ec) + ")";
    return break_group(Status(ErrorCode::kUnavailable,
                              fmt::format("rank {} (leader of group '{}') is gone during {}: {}; it died or exited, "
                                          "and this group cannot continue",
                                          leader, tag_, r.where, why),
                              {.rank = me, .peer = leader, .step = r.step}));
  }
  if (in.header.kind == kError) {
    Status error = decode_error(in.payload, me, leader);
    if (error.code() == ErrorCode::kUnavailable || error.code() == ErrorCode::kInternal) return break_group(error);
    return error;  // the group survives a caller's mistake (e.g. uneven lengths)
  }
  if (in.header.kind != kResult || in.header.seq != r.seq) {
    return break_group(internal_error("collectives out of step: expected the result of " + r.where));
  }
  return std::move(in.payload);
}

// Leader: gather every member's bytes, compute everyone's result, answer
// each member with its own (or with the error that stops the round).
Result<std::vector<std::byte>> TcpCollectives::round_as_leader(const Round& r, std::span<const std::byte> mine) {
  const int n = size();
  const auto deadline = Clock::now() + options_.op_timeout;
  std::vector<Frame> frames(static_cast<size_t>(n));
  const Status transport_failure = gather_member_inputs(r, deadline, frames);

  std::vector<std::vector<std::byte>> outputs;
  Status round_error = transport_failure;
  if (transport_failure.is_ok()) {
    std::vector<std::span<const std::byte>> inputs{mine};
    for (int gr = 1; gr < n; ++gr) inputs.emplace_back(frames[static_cast<size_t>(gr)].payload);
    auto computed = compute_outputs(r, inputs);
    if (computed.is_ok()) {
      outputs = std::move(computed).value();
    } else {
      round_error = std::move(computed).take_status().with_rank(world_rank());
    }
  }

  ENGRAM_RETURN_IF_ERROR(send_replies(r, round_error, outputs, deadline));
  if (!transport_failure.is_ok()) return break_group(transport_failure);
  if (!round_error.is_ok()) return round_error;
  return std::move(outputs[0]);
}

// Reads one frame from every member; the first death or out-of-step frame
// stops the wait for everyone.
Status TcpCollectives::gather_member_inputs(const Round& r, Clock::time_point deadline, std::vector<Frame>& frames) {
  const int n = size();
  const int me = world_rank();
  auto& impl = *impl_;
  int pending = 0;
  Status failure;
  for (int gr = 1; gr < n; ++gr) {
    ++pending;
    async_read_frame(*impl.links[static_cast<size_t>(gr)], frames[static_cast<size_t>(gr)], kMemberInputLimits,
                     [&, gr](error_code ec) {
      --pending;
      if (!failure.is_ok() || ec == asio::error::operation_aborted) return;
      const int peer = world_ranks_[static_cast<size_t>(gr)];
      const Frame& frame = frames[static_cast<size_t>(gr)];
      if (is_oversized_frame(ec)) {
        failure = Status(ErrorCode::kInternal,
                         fmt::format("protocol error: rank {} sent {} during {}; it runs another engramlab build or "
                                     "the stream is corrupt, and this group cannot continue",
                                     peer, oversized_frame_text(frame.header, kMemberInputLimits), r.where),
                         {.rank = me, .peer = peer, .step = r.step});
      } else if (ec) {
        failure = Status(ErrorCode::kUnavailable,
                         fmt::format("rank {} closed its connection ({}) during {}: it died or exited, and this group "
                                     "cannot continue",
                                     peer, describe_ec(ec), r.where),
                         {.rank = me, .peer = peer, .step = r.step});
      } else if (frame.header.kind != r.op || frame.header.seq != r.seq) {
        failure = Status(ErrorCode::kInternal,
                         fmt::format("rank {} sent op {} #{} while this rank runs {}: ranks called collectives in "
                                     "different orders",
                                     peer, frame.header.kind, frame.header.seq, r.where),
                         {.rank = me, .peer = peer, .step = r.step});
      } else {
        return;
      }
      impl.cancel_all();
    });
  }
  if (run_bounded(impl.io, deadline, pending) || !failure.is_ok()) return failure;

  std::vector<int> late;
  for (int gr = 1; gr < n; ++gr)
    if (frames[static_cast<size_t>(gr)].header.kind == 0) late.push_back(world_ranks_[static_cast<size_t>(gr)]);
  impl.cancel_all();
  drain(impl.io);
  return Status(ErrorCode::kUnavailable,
                fmt::format("rank(s) {} did not reach {} within {} ms: hung, dead, or slower than op_timeout",
                            compress_ranges(late), r.where, options_.op_timeout.count()),
                {.rank = me, .peer = late.empty() ? -1 : late.front(), .step = r.step});
}

// Every live member gets its result, or `error` when the round failed.
Status TcpCollectives::send_replies(const Round& r, const Status& error, std::vector<std::vector<std::byte>>& outputs,
                                    Clock::time_point deadline) {
  const int n = size();
  const int me = world_rank();
  auto& impl = *impl_;
  std::vector<Frame> replies(static_cast<size_t>(n));
  int writes = 0;
  for (int gr = 1; gr < n; ++gr) {
    auto& link = impl.links[static_cast<size_t>(gr)];
    if (!link || !link->is_open()) continue;
    replies[static_cast<size_t>(gr)] =
        error.is_ok() ? make_frame(kResult, r.seq, me, std::move(outputs[static_cast<size_t>(gr)]))
                      : make_frame(kError, r.seq, me, encode_error(error, r.step));
    ++writes;
    async_write_frame(*link, replies[static_cast<size_t>(gr)], [&](error_code) { --writes; });
  }
  const auto reply_deadline = error.is_ok() ? deadline + kReplyGrace : Clock::now() + kReplyGrace;
  if (run_bounded(impl.io, reply_deadline, writes)) return Status::ok();
  if (!error.is_ok()) {
    // The round already failed; the error is what the caller reports.
    impl.close_all();
    drain(impl.io);
    return Status::ok();
  }
  return break_group(Status(ErrorCode::kUnavailable, "sending the results of " + r.where + " timed out",
                            {.rank = me, .step = r.step}));
}

// What every rank receives, from every rank's input (the leader's arithmetic).
Result<std::vector<std::vector<std::byte>>> TcpCollectives::compute_outputs(
    const Round& r, const std::vector<std::span<const std::byte>>& in) const {
  const int n = static_cast<int>(in.size());
  for (int gr = 1; gr < n; ++gr) {
    if (in[static_cast<size_t>(gr)].size() != in[0].size()) {
      return Status(ErrorCode::kInvalidArgument,
                    fmt::format("rank {} passed {} bytes to {}, rank {} passed {}: every rank must pass the same "
                                "length",
                                world_ranks_[static_cast<size_t>(gr)], in[static_cast<size_t>(gr)].size(), r.step,
                                world_ranks_[0], in[0].size()),
                    {.peer = world_ranks_[static_cast<size_t>(gr)], .step = r.step});
    }
  }
  std::vector<std::vector<std::byte>> out(static_cast<size_t>(n));
  const size_t len = in[0].size();
  switch (r.op) {
    case kOpAllGather:
    case kOpBarrier:
    case kOpSplit: {
      std::vector<std::byte> all;
      for (const auto& part : in) all.insert(all.end(), part.begin(), part.end());
      for (auto& o : out) o = all;
      return out;
    }
    case kOpAllToAll: {
      if (len % static_cast<size_t>(n) != 0) {
        return Status(ErrorCode::kInvalidArgument,
                      fmt::format("{} bytes do not split into {} equal all_to_all chunks", len, n), {.step = r.step});
      }
      const size_t chunk = len / static_cast<size_t>(n);
      for (int j = 0; j < n; ++j) {
        for (int src = 0; src < n; ++src) {
          auto part = in[static_cast<size_t>(src)].subspan(static_cast<size_t>(j) * chunk, chunk);
          out[static_cast<size_t>(j)].insert(out[static_cast<size_t>(j)].end(), part.begin(), part.end());
        }
      }
      return out;
    }
    case kOpReduceScatter: {
      if (len % (2 * static_cast<size_t>(n)) != 0) {
        return Status(ErrorCode::kInvalidArgument,
                      fmt::format("{} bytes are not {} equal chunks of bf16 values", len, n), {.step = r.step});
      }
      const size_t values = len / 2;
      std::vector<std::vector<uint16_t>> inputs(static_cast<size_t>(n), std::vector<uint16_t>(values));
      std::vector<std::span<const uint16_t>> views;
      for (int src = 0; src < n; ++src) {
        std::memcpy(inputs[static_cast<size_t>(src)].data(), in[static_cast<size_t>(src)].data(), len);
        views.emplace_back(inputs[static_cast<size_t>(src)]);
      }
      const size_t chunk = values / static_cast<size_t>(n);
      std::vector<uint16_t> result(chunk);
      for (int dst = 0; dst < n; ++dst) {
        reduce_scatter_sum_bf16_reference(views, dst, result);
        out[static_cast<size_t>(dst)].resize(chunk * 2);
        std::memcpy(out[static_cast<size_t>(dst)].data(), result.data(), chunk * 2);
      }
      return out;
    }
    default:
      return internal_error("unknown collective op " + std::to_string(r.op));
  }
}

Status TcpCollectives::break_group(Status why) {
  broken_ = why;
  impl_->close_all();
  drain(impl_->io);
  return why;
}

Status TcpCollectives::all_gather(std::span<const std::byte> mine, std::span<std::byte> all) {
  ENGRAM_ASSIGN_OR_RETURN(auto result, round(kOpAllGather, "all_gather", mine, all.size()));
  std::memcpy(all.data(), result.data(), result.size());
  return Status::ok();
}

Status TcpCollectives::reduce_scatter_sum_bf16(std::span<const uint16_t> input, std::span<uint16_t> output) {
  ENGRAM_ASSIGN_OR_RETURN(auto result, round(kOpReduceScatter, "reduce_scatter", std::as_bytes(input),
                                             output.size() * sizeof(uint16_t)));
  std::memcpy(output.data(), result.data(), result.size());
  return Status::ok();
}

Status TcpCollectives::all_to_all(std::span<const std::byte> send, std::span<std::byte> receive) {
  ENGRAM_ASSIGN_OR_RETURN(auto result, round(kOpAllToAll, "all_to_all", send, receive.size()));
  std::memcpy(receive.data(), result.data(), result.size());
  return Status::ok();
}

Status TcpCollectives::barrier() {
  ENGRAM_ASSIGN_OR_RETURN(auto result, round(kOpBarrier, "barrier", {}, 0));
  return Status::ok();
}

Result<std::unique_ptr<Collectives>> TcpCollectives::split(int color, int key) {
  return without_asio_exceptions(fmt::format("rank {} splitting group '{}'", world_rank(), tag_),
                                 [&] { return split_unguarded(color, key); });
}

Result<std::unique_ptr<Collectives>> TcpCollectives::split_unguarded(int color, int key) {
  const int n = size();
  const int me = world_rank();
  // 1. Everyone's (color, key); my color's members ordered by (key, rank).
  std::array<int32_t, 2> mine{color, key};
  std::vector<int32_t> all(static_cast<size_t>(n) * 2);
  ENGRAM_ASSIGN_OR_RETURN(auto gathered, round(kOpSplit, "split", std::as_bytes(std::span(mine)), all.size() * 4));
  std::memcpy(all.data(), gathered.data(), gathered.size());
  std::vector<int> members;  // parent group ranks
  for (int r = 0; r < n; ++r)
    if (all[static_cast<size_t>(r) * 2] == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return all[static_cast<size_t>(a) * 2 + 1] < all[static_cast<size_t>(b) * 2 + 1];
  });
  const int new_rank = static_cast<int>(std::find(members.begin(), members.end(), group_rank_) - members.begin());
  ENGRAM_CHECK(new_rank < static_cast<int>(members.size()));

  // 2. The new group, before it has met.
  std::unique_ptr<TcpCollectives> group(new TcpCollectives());
  group->options_ = options_;
  group->group_rank_ = new_rank;
  group->tag_ = tag_ + "/split" + std::to_string(++splits_) + ":" + std::to_string(color);
  for (int r : members) {
    group->world_ranks_.push_back(world_ranks_[static_cast<size_t>(r)]);
    group->addresses_.push_back(addresses_[static_cast<size_t>(r)]);
  }
  const bool leader = new_rank == 0 && members.size() > 1;

  // 3. Each new leader listens, and every rank learns the ports through
  // this group. A failed listen still joins the exchange (port 0), so the
  // others fail fast instead of waiting.
  // A rank short of fds says so in the exchange (port -1): the group fails
  // at once naming it, where a member's connect would retry until the join
  // timeout. The acceptor has made the new group's event loop (its epoll
  // set, eventfd and timerfd); then the leader needs its listener and a
  // socket per member, a member one socket.
  tcp::acceptor acceptor(group->impl_->io);
  const Status fds = members.size() == 1 ? Status::ok()
                                         : check_fds_available(
                                               leader ? members.size() : 1,
                                               fmt::format("rank {} joining group '{}' of {} ranks{}", me, group->tag_,
                                                           members.size(), leader ? " as its leader" : ""));
  constexpr int32_t kOutOfFds = -1;
  error_code listen_error;
  int32_t my_port = !fds.is_ok() ? kOutOfFds
                    : leader     ? listen_for_split(acceptor, addresses_[static_cast<size_t>(group_rank_)], listen_error)
                                 : 0;
  if (out_of_fds(listen_error)) my_port = kOutOfFds;  // the peers name the cause too
  std::vector<int32_t> ports(static_cast<size_t>(n));
  ENGRAM_ASSIGN_OR_RETURN(auto port_bytes,
                          round(kOpSplit, "split", std::as_bytes(std::span(&my_port, 1)), ports.size() * 4));
  std::memcpy(ports.data(), port_bytes.data(), port_bytes.size());
  if (!fds.is_ok()) return Status(fds.code(), fds.message(), {.rank = me, .step = "split"});
  if (out_of_fds(listen_error)) {
    const Status exhausted =
        fd_exhausted(fmt::format("cannot open the listening socket of group '{}'", group->tag_), listen_error.message());
    return Status(exhausted.code(), exhausted.message(), {.rank = me, .step = "split"});
  }
  for (int r : members) {
    if (ports[static_cast<size_t>(r)] != kOutOfFds) continue;
    const int short_rank = world_ranks_[static_cast<size_t>(r)];
    return Status(ErrorCode::kResourceExhausted,
                  fmt::format("rank {} has too few file descriptors to join group '{}' (its own error names "
                              "RLIMIT_NOFILE and what it needs)",
                              short_rank, group->tag_),
                  {.rank = me, .peer = short_rank, .step = "split"});
  }
  if (members.size() == 1) return std::unique_ptr<Collectives>(std::move(group));

  // 4. The new group meets, authenticated as the world did.
  const int leader_parent_rank = members[0];
  const int leader_world_rank = world_ranks_[static_cast<size_t>(leader_parent_rank)];
  const std::string& leader_address = addresses_[static_cast<size_t>(leader_parent_rank)];
  const int32_t leader_port = ports[static_cast<size_t>(leader_parent_rank)];
  if (leader_port == 0) {
    return Status(ErrorCode::kUnavailable,
                  fmt::format("the leader of split color {} could not open a port on {} (its own error says why)",
                              color, leader_address),
                  {.rank = me, .peer = leader_world_rank, .step = "split"});
  }
  auto& impl = *group->impl_;
  const RendezvousSettings settings = rendezvous_settings(options_, group->tag_, Clock::now() + options_.join_timeout);
  if (leader) {
    impl.links.resize(members.size());
    ENGRAM_RETURN_IF_ERROR(admit_members(impl.io, acceptor, settings, group->world_ranks_, impl.links,
                                         group->addresses_, refused_connections_));
  } else {
    impl.links.resize(1);
    const MemberClaim claim{me, new_rank, static_cast<int32_t>(members.size())};
    ENGRAM_ASSIGN_OR_RETURN(GroupTable table, join_leader(impl.io, leader_address, static_cast<uint16_t>(leader_port),
                                                          settings, claim, leader_world_rank, impl.links[0]));
    (void)table;  // a split member keeps the parent's addresses
  }
  return std::unique_ptr<Collectives>(std::move(group));
}

}  // namespace engram::ipc
