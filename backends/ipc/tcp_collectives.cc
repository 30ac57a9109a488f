#include "backends/ipc/tcp_collectives.h"

#include <algorithm>
#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <cstring>
#include <functional>
#include <list>
#include <map>
#include <thread>

#include "backends/ipc/job_token.h"
#include "backends/ipc/wire.h"

namespace engram::ipc {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using error_code = boost::system::error_code;

constexpr uint32_t kFrameMagic = 0x45434F4C;  // "ECOL"
constexpr size_t kMaxHelloBytes = 4096;
constexpr size_t kMaxPayloadBytes = size_t{1} << 36;

enum Kind : uint32_t {
  kHello = 1,
  kWelcome = 2,
  kOpAllGather = 10,
  kOpReduceScatter = 11,
  kOpAllToAll = 12,
  kOpBarrier = 13,
  kOpSplit = 14,
  kResult = 20,
  kError = 21,
};

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint32_t kind = 0;
  uint64_t seq = 0;
  uint64_t payload_bytes = 0;
  int32_t origin = -1;  // world rank of the sender
  int32_t reserved = 0;
};

struct Frame {
  FrameHeader header;
  std::vector<std::byte> payload;
};

Frame make_frame(uint32_t kind, uint64_t seq, int origin, std::vector<std::byte> payload) {
  Frame f;
  f.header.kind = kind;
  f.header.seq = seq;
  f.header.origin = origin;
  f.header.payload_bytes = payload.size();
  f.payload = std::move(payload);
  return f;
}

void async_read_frame(tcp::socket& socket, Frame& frame, size_t max_payload, std::function<void(error_code)> done) {
  asio::async_read(socket, asio::buffer(&frame.header, sizeof(FrameHeader)),
                   [&socket, &frame, max_payload, done](error_code ec, size_t) {
                     if (ec) return done(ec);
                     if (frame.header.magic != kFrameMagic || frame.header.payload_bytes > max_payload) {
                       return done(boost::system::errc::make_error_code(boost::system::errc::protocol_error));
                     }
                     frame.payload.resize(frame.header.payload_bytes);
                     asio::async_read(socket, asio::buffer(frame.payload),
                                      [done](error_code ec2, size_t) { done(ec2); });
                   });
}

void async_write_frame(tcp::socket& socket, const Frame& frame, std::function<void(error_code)> done) {
  std::array<asio::const_buffer, 2> buffers{asio::buffer(&frame.header, sizeof(FrameHeader)),
                                            asio::buffer(frame.payload)};
  asio::async_write(socket, buffers, [done](error_code ec, size_t) { done(ec); });
}

// Runs handlers until `pending` reaches zero or the deadline passes.
bool run_bounded(asio::io_context& io, Clock::time_point deadline, const int& pending) {
  io.restart();
  while (pending > 0) {
    if (io.run_one_until(deadline) == 0) break;
  }
  return pending == 0;
}

// After cancelling or closing everything: let the aborted handlers run.
void drain(asio::io_context& io) {
  io.restart();
  io.run();
}

std::string describe_ec(const error_code& ec) {
  if (ec == asio::error::eof) return "end of file";
  return ec.message();
}

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
  auto step = r.get_string(1024);
  auto message = r.get_string(1 << 20);
  if (!code || !peer || !step || !message || *code == 0 || *code > static_cast<uint8_t>(ErrorCode::kInternal)) {
    return Status(ErrorCode::kInternal, "the leader sent a malformed error frame",
                  {.rank = my_world_rank, .peer = leader_world_rank, .step = ""});
  }
  return Status(static_cast<ErrorCode>(*code), "reported by rank " + std::to_string(leader_world_rank) + ": " + *message,
                {.rank = my_world_rank, .peer = *peer, .step = *step});
}

struct Hello {
  std::string tag, token, job_id, address;
  int32_t world_rank = -1, group_rank = -1, group_size = 0;
};

std::vector<std::byte> encode_hello(const Hello& h) {
  ByteWriter w;
  w.put_string(h.tag);
  w.put_string(h.token);
  w.put_string(h.job_id);
  w.put_string(h.address);
  w.put(h.world_rank);
  w.put(h.group_rank);
  w.put(h.group_size);
  return std::move(w.bytes());
}

std::optional<Hello> decode_hello(const std::vector<std::byte>& payload) {
  ByteReader r(payload.data(), payload.size());
  Hello h;
  auto tag = r.get_string(512), token = r.get_string(512), job = r.get_string(512), addr = r.get_string(512);
  auto wr = r.get<int32_t>(), gr = r.get<int32_t>(), gs = r.get<int32_t>();
  if (!tag || !token || !job || !addr || !wr || !gr || !gs) return std::nullopt;
  h.tag = *tag, h.token = *token, h.job_id = *job, h.address = *addr;
  h.world_rank = *wr, h.group_rank = *gr, h.group_size = *gs;
  return h;
}

struct Welcome {
  std::vector<int32_t> world_ranks;
  std::vector<std::string> addresses;
};

std::vector<std::byte> encode_welcome(const Welcome& wel) {
  ByteWriter w;
  w.put<uint32_t>(static_cast<uint32_t>(wel.world_ranks.size()));
  for (size_t i = 0; i < wel.world_ranks.size(); ++i) {
    w.put(wel.world_ranks[i]);
    w.put_string(wel.addresses[i]);
  }
  return std::move(w.bytes());
}

std::optional<Welcome> decode_welcome(const std::vector<std::byte>& payload) {
  ByteReader r(payload.data(), payload.size());
  auto n = r.get<uint32_t>();
  if (!n || *n > (1u << 20)) return std::nullopt;
  Welcome wel;
  for (uint32_t i = 0; i < *n; ++i) {
    auto wr = r.get<int32_t>();
    auto addr = r.get_string(512);
    if (!wr || !addr) return std::nullopt;
    wel.world_ranks.push_back(*wr);
    wel.addresses.push_back(*addr);
  }
  return wel;
}

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

namespace {

// Leader side of a handshake: accepts connections until every other group
// rank has presented the right token, job id, group tag and rank. Strangers
// are refused (closed, nothing sent) and logged; the wait goes on.
Status accept_members(asio::io_context& io, tcp::acceptor& acceptor, const TcpCollectivesOptions& options,
                      const std::string& tag, const std::vector<int>& world_ranks, int my_world_rank,
                      Clock::time_point deadline, std::vector<std::unique_ptr<tcp::socket>>& links,
                      std::vector<std::string>& addresses, int& refused) {
  const int group_size = static_cast<int>(world_ranks.size());
  struct Pending {
    std::unique_ptr<tcp::socket> socket;
    Frame hello;
  };
  std::list<Pending> pending_conns;
  int joined = 0;
  int pending_ops = 1;  // the accept loop itself until everyone joined
  bool accepting = true;

  auto refuse = [&](Pending& p, const std::string& why) {
    ++refused;
    error_code ec;
    const auto remote = p.socket->remote_endpoint(ec);
    std::fprintf(stderr, "engramlab: rank %d refused a connection to group '%s' from %s: %s; the job continues\n",
                 my_world_rank, tag.c_str(), ec ? "?" : (remote.address().to_string() + ":" + std::to_string(remote.port())).c_str(),
                 why.c_str());
    p.socket->close(ec);
  };
  auto finish_if_done = [&]() {
    if (joined == group_size - 1 && accepting) {
      accepting = false;
      error_code ignored;
      acceptor.close(ignored);
      for (auto& p : pending_conns) if (p.socket) p.socket->close(ignored);
    }
  };
  std::function<void()> accept_next = [&]() {
    auto socket = std::make_unique<tcp::socket>(io);
    tcp::socket& ref = *socket;
    acceptor.async_accept(ref, [&, socket = std::move(socket)](error_code ec) mutable {
      if (ec || !accepting) {
        --pending_ops;
        return;
      }
      pending_conns.push_back(Pending{std::move(socket), {}});
      auto it = std::prev(pending_conns.end());
      ++pending_ops;
      async_read_frame(*it->socket, it->hello, kMaxHelloBytes, [&, it](error_code rec) {
        --pending_ops;
        if (!accepting) return;
        if (rec || it->hello.header.kind != kHello) {
          refuse(*it, rec ? "no valid hello (" + describe_ec(rec) + ")" : "not a hello frame");
          return;
        }
        auto hello = decode_hello(it->hello.payload);
        if (!hello) return refuse(*it, "malformed hello");
        if (!tokens_equal(hello->token, options.job_token)) return refuse(*it, "wrong job token");
        if (hello->job_id != options.job_id) {
          return refuse(*it, "job id '" + hello->job_id + "' is not this job's ('" + options.job_id + "')");
        }
        if (hello->tag != tag) return refuse(*it, "for group '" + hello->tag + "', not this one");
        const int gr = hello->group_rank;
        if (hello->group_size != group_size || gr <= 0 || gr >= group_size ||
            world_ranks[static_cast<size_t>(gr)] != hello->world_rank) {
          return refuse(*it, "claims rank " + std::to_string(hello->world_rank) + " as group rank " +
                                 std::to_string(gr) + " of " + std::to_string(hello->group_size));
        }
        if (links[static_cast<size_t>(gr)]) return refuse(*it, "rank " + std::to_string(hello->world_rank) + " joined twice");
        links[static_cast<size_t>(gr)] = std::move(it->socket);
        addresses[static_cast<size_t>(gr)] = hello->address;
        ++joined;
        finish_if_done();
      });
      accept_next();
    });
  };
  if (group_size > 1) {
    accept_next();
  } else {
    pending_ops = 0;
  }
  const bool done = run_bounded(io, deadline, pending_ops);
  if (!done || joined != group_size - 1) {
    accepting = false;
    error_code ignored;
    acceptor.close(ignored);
    for (auto& p : pending_conns) if (p.socket) p.socket->close(ignored);
    for (auto& link : links) if (link) link->close(ignored);
    drain(io);
    std::string missing;
    for (int gr = 1; gr < group_size; ++gr) {
      if (!links[static_cast<size_t>(gr)]) missing += (missing.empty() ? "" : ", ") + std::to_string(world_ranks[static_cast<size_t>(gr)]);
    }
    return Status(ErrorCode::kUnavailable,
                  "group '" + tag + "': waited " + std::to_string(options.join_timeout.count()) + " ms, ranks " +
                      missing + " never joined (not started, crashed, wrong MASTER_ADDR/MASTER_PORT, or a different "
                      "ENGRAMLAB_JOB_TOKEN/ENGRAMLAB_JOB_ID)",
                  {.rank = my_world_rank, .step = "rendezvous"});
  }
  drain(io);
  // Welcome everyone with the group's table.
  Welcome welcome;
  for (int gr = 0; gr < group_size; ++gr) {
    welcome.world_ranks.push_back(world_ranks[static_cast<size_t>(gr)]);
    welcome.addresses.push_back(addresses[static_cast<size_t>(gr)]);
  }
  const Frame frame = make_frame(kWelcome, 0, my_world_rank, encode_welcome(welcome));
  int writes = 0;
  error_code first;
  int failed_gr = -1;
  for (int gr = 1; gr < group_size; ++gr) {
    ++writes;
    async_write_frame(*links[static_cast<size_t>(gr)], frame, [&, gr](error_code ec) {
      --writes;
      if (ec && !first) first = ec, failed_gr = gr;
    });
  }
  if (!run_bounded(io, deadline, writes) || first) {
    error_code ignored;
    for (auto& link : links) if (link) link->close(ignored);
    drain(io);
    const int peer = failed_gr > 0 ? world_ranks[static_cast<size_t>(failed_gr)] : -1;
    return Status(ErrorCode::kUnavailable,
                  "group '" + tag + "': welcoming rank " + std::to_string(peer) + " failed: " +
                      (first ? describe_ec(first) : std::string("timed out")),
                  {.rank = my_world_rank, .peer = peer, .step = "rendezvous"});
  }
  return Status::ok();
}

// Member side: connects (retrying while the leader is not up yet), says
// hello, waits for the welcome.
Result<Welcome> connect_to_leader(asio::io_context& io, const std::string& host, uint16_t port, Hello hello,
                                  int leader_world_rank, Clock::time_point deadline,
                                  std::unique_ptr<tcp::socket>& link) {
  const int me = hello.world_rank;
  auto fail = [&](ErrorCode code, std::string message) {
    return Status(code, std::move(message), {.rank = me, .peer = leader_world_rank, .step = "rendezvous"});
  };
  tcp::resolver resolver(io);
  error_code ec;
  auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) return fail(ErrorCode::kInvalidArgument, "cannot resolve MASTER_ADDR '" + host + "': " + ec.message());
  std::string last_error = "no attempt";
  for (;;) {
    link = std::make_unique<tcp::socket>(io);
    int pending = 1;
    error_code connect_ec;
    asio::async_connect(*link, endpoints, [&](error_code e, const tcp::endpoint&) {
      connect_ec = e;
      --pending;
    });
    const auto attempt_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(1));
    if (!run_bounded(io, attempt_deadline, pending)) {
      link->close(ec);
      drain(io);
      connect_ec = asio::error::timed_out;
    }
    if (!connect_ec) break;
    last_error = connect_ec.message();
    link.reset();
    if (Clock::now() >= deadline) {
      return fail(ErrorCode::kUnavailable, "cannot reach rank " + std::to_string(leader_world_rank) + " at " + host +
                                               ":" + std::to_string(port) + ": " + last_error +
                                               " (not started, dead, wrong MASTER_ADDR/MASTER_PORT, or another host's "
                                               "network cannot reach it)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  hello.address = link->local_endpoint(ec).address().to_string();
  const Frame out = make_frame(kHello, 0, me, encode_hello(hello));
  Frame in;
  int pending = 2;
  error_code write_ec, read_ec;
  async_write_frame(*link, out, [&](error_code e) { write_ec = e; --pending; });
  async_read_frame(*link, in, size_t{1} << 24, [&](error_code e) { read_ec = e; --pending; });
  if (!run_bounded(io, deadline, pending)) {
    link->close(ec);
    drain(io);
    return fail(ErrorCode::kUnavailable, "rank " + std::to_string(leader_world_rank) + " at " + host + ":" +
                                             std::to_string(port) + " did not welcome us within the join timeout: "
                                             "other ranks never arrived");
  }
  if (write_ec || read_ec || in.header.kind != kWelcome) {
    link->close(ec);
    return fail(ErrorCode::kPermissionDenied,
                "rank " + std::to_string(leader_world_rank) + " at " + host + ":" + std::to_string(port) +
                    " closed the connection without welcoming us (" + describe_ec(write_ec ? write_ec : read_ec) +
                    "): our ENGRAMLAB_JOB_TOKEN or ENGRAMLAB_JOB_ID differs from its own (every rank needs the "
                    "same), or it died");
  }
  auto welcome = decode_welcome(in.payload);
  if (!welcome || welcome->world_ranks.size() != static_cast<size_t>(hello.group_size)) {
    return fail(ErrorCode::kInternal, "malformed welcome from rank " + std::to_string(leader_world_rank));
  }
  return *welcome;
}

}  // namespace

Result<std::unique_ptr<TcpCollectives>> TcpCollectives::join(const TcpCollectivesOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return invalid_argument("collectives: rank " + std::to_string(options.rank) + " outside world size " +
                            std::to_string(options.world_size));
  }
  if (options.job_token.empty()) return invalid_argument("collectives: empty job token (ENGRAMLAB_JOB_TOKEN)");
  std::unique_ptr<TcpCollectives> group(new TcpCollectives());
  group->options_ = options;
  group->group_rank_ = options.rank;
  group->tag_ = "world";
  for (int r = 0; r < options.world_size; ++r) group->world_ranks_.push_back(r);
  group->addresses_.assign(static_cast<size_t>(options.world_size), "");
  auto& impl = *group->impl_;
  const auto deadline = Clock::now() + options.join_timeout;
  if (options.world_size == 1) {
    group->addresses_[0] = options.master_addr;
    return group;
  }
  if (options.rank == 0) {
    tcp::resolver resolver(impl.io);
    error_code ec;
    auto endpoints = resolver.resolve(options.master_addr, std::to_string(options.master_port), ec);
    if (ec || endpoints.empty()) {
      return Status(ErrorCode::kInvalidArgument, "cannot resolve MASTER_ADDR '" + options.master_addr + "': " + ec.message(),
                    {.rank = 0, .step = "rendezvous"});
    }
    const tcp::endpoint endpoint = *endpoints.begin();
    tcp::acceptor acceptor(impl.io);
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
    group->addresses_[0] = endpoint.address().to_string();
    impl.links.resize(static_cast<size_t>(options.world_size));
    ENGRAM_RETURN_IF_ERROR(accept_members(impl.io, acceptor, options, group->tag_, group->world_ranks_, 0, deadline,
                                          impl.links, group->addresses_, group->refused_connections_));
    return group;
  }
  Hello hello{group->tag_, options.job_token, options.job_id, "", options.rank, options.rank, options.world_size};
  impl.links.resize(1);
  ENGRAM_ASSIGN_OR_RETURN(Welcome welcome, connect_to_leader(impl.io, options.master_addr, options.master_port, hello, 0,
                                                             deadline, impl.links[0]));
  group->addresses_ = welcome.addresses;
  return group;
}

// One round through the leader: every member sends its bytes, the leader
// computes every rank's result and sends each its own.
Result<std::vector<std::byte>> TcpCollectives::round(uint32_t op, const char* step, std::span<const std::byte> mine,
                                                     size_t expected_result_bytes) {
  if (!broken_.is_ok()) return broken_;
  const uint64_t seq = ++seq_;
  const int n = size();
  const int me = world_rank();
  const std::string where = std::string(step) + " #" + std::to_string(seq);
  auto& impl = *impl_;

  // What every rank receives, from everyone's inputs (leader only).
  auto compute = [&](const std::vector<std::span<const std::byte>>& in) -> Result<std::vector<std::vector<std::byte>>> {
    for (int r = 1; r < n; ++r) {
      if (in[static_cast<size_t>(r)].size() != in[0].size()) {
        return Status(ErrorCode::kInvalidArgument,
                      "rank " + std::to_string(world_ranks_[static_cast<size_t>(r)]) + " passed " +
                          std::to_string(in[static_cast<size_t>(r)].size()) + " bytes to " + step + ", rank " +
                          std::to_string(world_ranks_[0]) + " passed " + std::to_string(in[0].size()) +
                          ": every rank must pass the same length",
                      {.peer = world_ranks_[static_cast<size_t>(r)], .step = step});
      }
    }
    std::vector<std::vector<std::byte>> out(static_cast<size_t>(n));
    const size_t len = in[0].size();
    if (op == kOpAllGather || op == kOpBarrier || op == kOpSplit) {
      std::vector<std::byte> all;
      for (const auto& part : in) all.insert(all.end(), part.begin(), part.end());
      for (auto& o : out) o = all;
    } else if (op == kOpAllToAll) {
      if (len % static_cast<size_t>(n) != 0) {
        return Status(ErrorCode::kInvalidArgument, std::to_string(len) + " bytes do not split into " +
                                                       std::to_string(n) + " equal all_to_all chunks",
                      {.step = step});
      }
      const size_t chunk = len / static_cast<size_t>(n);
      for (int j = 0; j < n; ++j) {
        for (int r = 0; r < n; ++r) {
          auto src = in[static_cast<size_t>(r)].subspan(static_cast<size_t>(j) * chunk, chunk);
          out[static_cast<size_t>(j)].insert(out[static_cast<size_t>(j)].end(), src.begin(), src.end());
        }
      }
    } else if (op == kOpReduceScatter) {
      if (len % (2 * static_cast<size_t>(n)) != 0) {
        return Status(ErrorCode::kInvalidArgument, std::to_string(len) + " bytes are not " + std::to_string(n) +
                                                       " equal chunks of bf16 values",
                      {.step = step});
      }
      const size_t values = len / 2;
      std::vector<std::vector<uint16_t>> inputs(static_cast<size_t>(n), std::vector<uint16_t>(values));
      std::vector<std::span<const uint16_t>> views;
      for (int r = 0; r < n; ++r) {
        std::memcpy(inputs[static_cast<size_t>(r)].data(), in[static_cast<size_t>(r)].data(), len);
        views.emplace_back(inputs[static_cast<size_t>(r)]);
      }
      const size_t chunk = values / static_cast<size_t>(n);
      std::vector<uint16_t> result(chunk);
      for (int r = 0; r < n; ++r) {
        reduce_scatter_sum_bf16_reference(views, r, result);
        out[static_cast<size_t>(r)].resize(chunk * 2);
        std::memcpy(out[static_cast<size_t>(r)].data(), result.data(), chunk * 2);
      }
    } else {
      return internal_error("unknown collective op " + std::to_string(op));
    }
    return out;
  };

  auto check_result = [&](std::vector<std::byte> result) -> Result<std::vector<std::byte>> {
    if (result.size() != expected_result_bytes) {
      return Status(ErrorCode::kInvalidArgument,
                    std::string(step) + " produced " + std::to_string(result.size()) + " bytes for a " +
                        std::to_string(expected_result_bytes) + "-byte output buffer",
                    {.rank = me, .step = step});
    }
    return result;
  };

  if (n == 1) {
    ENGRAM_ASSIGN_OR_RETURN(auto out, compute({mine}));
    return check_result(std::move(out[0]));
  }

  if (group_rank_ != 0) {
    // Member: send, then wait for the result (or the leader's error).
    const int leader = world_ranks_[0];
    tcp::socket& link = *impl.links[0];
    const Frame out = make_frame(op, seq, me, std::vector<std::byte>(mine.begin(), mine.end()));
    Frame in;
    int pending = 2;
    error_code write_ec, read_ec;
    async_write_frame(link, out, [&](error_code e) { write_ec = e; --pending; });
    async_read_frame(link, in, kMaxPayloadBytes, [&](error_code e) { read_ec = e; --pending; });
    // A little longer than the leader waits, so its explanation arrives first.
    const auto deadline = Clock::now() + options_.op_timeout + std::chrono::milliseconds(1000);
    const bool done = run_bounded(impl.io, deadline, pending);
    if (!done || read_ec || (write_ec && !(in.header.kind == kError))) {
      impl.close_all();
      drain(impl.io);
      const std::string why = !done ? "no answer within " + std::to_string(options_.op_timeout.count() + 1000) + " ms"
                                    : "the connection closed (" + describe_ec(read_ec ? read_ec : write_ec) + ")";
      broken_ = Status(ErrorCode::kUnavailable,
                       "rank " + std::to_string(leader) + " (leader of group '" + tag_ + "') is gone during " + where +
                           ": " + why + "; it died or exited, and this group cannot continue",
                       {.rank = me, .peer = leader, .step = step});
      return broken_;
    }
    if (in.header.kind == kError) {
      Status error = decode_error(in.payload, me, leader);
      if (error.code() == ErrorCode::kUnavailable || error.code() == ErrorCode::kInternal) {
        broken_ = error;
        impl.close_all();
        drain(impl.io);
      }
      return error;
    }
    if (in.header.kind != kResult || in.header.seq != seq) {
      broken_ = internal_error("collectives out of step: expected the result of " + where);
      impl.close_all();
      drain(impl.io);
      return broken_;
    }
    return check_result(std::move(in.payload));
  }

  // Leader: gather every member's frame, failing fast on the first death.
  std::vector<Frame> frames(static_cast<size_t>(n));
  int pending = 0;
  Status failure;
  const auto deadline = Clock::now() + options_.op_timeout;
  for (int gr = 1; gr < n; ++gr) {
    ++pending;
    async_read_frame(*impl.links[static_cast<size_t>(gr)], frames[static_cast<size_t>(gr)], kMaxPayloadBytes,
                     [&, gr](error_code ec) {
                       --pending;
                       if (!failure.is_ok() || ec == asio::error::operation_aborted) return;
                       const int peer = world_ranks_[static_cast<size_t>(gr)];
                       const FrameHeader& h = frames[static_cast<size_t>(gr)].header;
                       if (ec) {
                         failure = Status(ErrorCode::kUnavailable,
                                          "rank " + std::to_string(peer) + " closed its connection (" +
                                              describe_ec(ec) + ") during " + where +
                                              ": it died or exited, and this group cannot continue",
                                          {.rank = me, .peer = peer, .step = step});
                       } else if (h.kind != op || h.seq != seq) {
                         failure = Status(ErrorCode::kInternal,
                                          "rank " + std::to_string(peer) + " sent op " + std::to_string(h.kind) + " #" +
                                              std::to_string(h.seq) + " while this rank runs " + where +
                                              ": ranks called collectives in different orders",
                                          {.rank = me, .peer = peer, .step = step});
                       } else {
                         return;
                       }
                       for (auto& link : impl.links) if (link) link->cancel();
                     });
  }
  if (!run_bounded(impl.io, deadline, pending) && failure.is_ok()) {
    std::string late;
    for (int gr = 1; gr < n; ++gr) {
      if (frames[static_cast<size_t>(gr)].header.kind == 0) late += (late.empty() ? "" : ", ") + std::to_string(world_ranks_[static_cast<size_t>(gr)]);
    }
    const int peer = late.empty() ? -1 : std::stoi(late.substr(0, late.find(',')));
    failure = Status(ErrorCode::kUnavailable,
                     "rank(s) " + late + " did not reach " + where + " within " +
                         std::to_string(options_.op_timeout.count()) + " ms: hung, dead, or slower than op_timeout",
                     {.rank = me, .peer = peer, .step = step});
    for (auto& link : impl.links) if (link) link->cancel();
    drain(impl.io);
  }

  std::vector<std::vector<std::byte>> outputs;
  Status compute_error;
  if (failure.is_ok()) {
    std::vector<std::span<const std::byte>> inputs{mine};
    for (int gr = 1; gr < n; ++gr) inputs.emplace_back(frames[static_cast<size_t>(gr)].payload);
    auto computed = compute(inputs);
    if (computed.is_ok()) {
      outputs = std::move(computed).value();
    } else {
      compute_error = std::move(computed).take_status().with_rank(me);
    }
  }
  const Status& error = failure.is_ok() ? compute_error : failure;

  // Answer every live member: its result, or the error that stops the round.
  std::vector<Frame> replies(static_cast<size_t>(n));
  int writes = 0;
  for (int gr = 1; gr < n; ++gr) {
    auto& link = impl.links[static_cast<size_t>(gr)];
    if (!link || !link->is_open()) continue;
    replies[static_cast<size_t>(gr)] =
        error.is_ok() ? make_frame(kResult, seq, me, std::move(outputs[static_cast<size_t>(gr)]))
                      : make_frame(kError, seq, me, encode_error(error, step));
    ++writes;
    async_write_frame(*link, replies[static_cast<size_t>(gr)], [&](error_code) { --writes; });
  }
  const auto reply_deadline = error.is_ok() ? deadline + std::chrono::milliseconds(1000)
                                            : Clock::now() + std::chrono::milliseconds(1000);
  if (!run_bounded(impl.io, reply_deadline, writes)) {
    impl.close_all();
    drain(impl.io);
    if (error.is_ok()) {
      broken_ = Status(ErrorCode::kUnavailable, "sending the results of " + where + " timed out",
                       {.rank = me, .step = step});
      return broken_;
    }
  }
  if (!failure.is_ok()) {
    broken_ = failure;
    impl.close_all();
    drain(impl.io);
    return failure;
  }
  if (!compute_error.is_ok()) return compute_error;
  return check_result(std::move(outputs[0]));
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
  const int n = size();
  const int me = world_rank();
  // 1. Everyone's (color, key).
  std::array<int32_t, 2> mine{color, key};
  std::vector<int32_t> all(static_cast<size_t>(n) * 2);
  ENGRAM_ASSIGN_OR_RETURN(auto gathered, round(kOpSplit, "split", std::as_bytes(std::span(mine)), all.size() * 4));
  std::memcpy(all.data(), gathered.data(), gathered.size());
  std::vector<int> members;  // parent group ranks with my color, by (key, rank)
  for (int r = 0; r < n; ++r) if (all[static_cast<size_t>(r) * 2] == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return all[static_cast<size_t>(a) * 2 + 1] < all[static_cast<size_t>(b) * 2 + 1];
  });
  const int new_rank = static_cast<int>(std::find(members.begin(), members.end(), group_rank_) - members.begin());
  ENGRAM_CHECK(new_rank < static_cast<int>(members.size()));

  std::unique_ptr<TcpCollectives> group(new TcpCollectives());
  group->options_ = options_;
  group->group_rank_ = new_rank;
  group->tag_ = tag_ + "/split" + std::to_string(++splits_) + ":" + std::to_string(color);
  for (int r : members) {
    group->world_ranks_.push_back(world_ranks_[static_cast<size_t>(r)]);
    group->addresses_.push_back(addresses_[static_cast<size_t>(r)]);
  }
  const bool leader = new_rank == 0 && members.size() > 1;

  // 2. Each new leader listens on an ephemeral port of its address, and
  // every rank learns the ports through this group.
  tcp::acceptor acceptor(group->impl_->io);
  int32_t my_port = 0;
  if (leader) {
    error_code ec;
    const auto address = asio::ip::make_address(addresses_[static_cast<size_t>(group_rank_)], ec);
    if (!ec) acceptor.open(tcp::endpoint(address, 0).protocol(), ec);
    if (!ec) acceptor.bind(tcp::endpoint(address, 0), ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    // A failed listen still joins the port exchange (port 0), so the others
    // fail fast instead of waiting.
    if (!ec) my_port = acceptor.local_endpoint().port();
  }
  std::vector<int32_t> ports(static_cast<size_t>(n));
  ENGRAM_ASSIGN_OR_RETURN(auto port_bytes, round(kOpSplit, "split", std::as_bytes(std::span(&my_port, 1)), ports.size() * 4));
  std::memcpy(ports.data(), port_bytes.data(), port_bytes.size());
  if (members.size() == 1) return std::unique_ptr<Collectives>(std::move(group));

  const auto deadline = Clock::now() + options_.join_timeout;
  const int leader_parent_rank = members[0];
  const int32_t leader_port = ports[static_cast<size_t>(leader_parent_rank)];
  if (leader_port == 0) {
    return Status(ErrorCode::kUnavailable,
                  "the leader of split color " + std::to_string(color) + " could not open a port on " +
                      addresses_[static_cast<size_t>(leader_parent_rank)],
                  {.rank = me, .peer = world_ranks_[static_cast<size_t>(leader_parent_rank)], .step = "split"});
  }
  auto& impl = *group->impl_;
  if (leader) {
    impl.links.resize(members.size());
    ENGRAM_RETURN_IF_ERROR(accept_members(impl.io, acceptor, options_, group->tag_, group->world_ranks_, me, deadline,
                                          impl.links, group->addresses_, refused_connections_));
  } else {
    impl.links.resize(1);
    Hello hello{group->tag_, options_.job_token, options_.job_id, "", me, new_rank,
                static_cast<int32_t>(members.size())};
    ENGRAM_ASSIGN_OR_RETURN(Welcome welcome,
                            connect_to_leader(impl.io, addresses_[static_cast<size_t>(leader_parent_rank)],
                                              static_cast<uint16_t>(leader_port), hello,
                                              world_ranks_[static_cast<size_t>(leader_parent_rank)], deadline,
                                              impl.links[0]));
    (void)welcome;
  }
  return std::unique_ptr<Collectives>(std::move(group));
}

}  // namespace engram::ipc
