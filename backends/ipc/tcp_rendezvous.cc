#include "backends/ipc/tcp_rendezvous.h"

#include <fmt/format.h>
#include <sys/random.h>

#include <algorithm>
#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <list>
#include <optional>
#include <thread>

#include "backends/ipc/fd_limit.h"
#include "backends/ipc/hmac_sha256.h"
#include "backends/ipc/wire.h"
#include "core/base/text_list.h"

namespace engram::ipc {
namespace {

constexpr uint32_t kHandshakeVersion = 1;
constexpr size_t kMaxHandshakeBytes = 4096;
constexpr size_t kMaxNameBytes = 512;
constexpr int kRefusalsLoggedOneByOne = 8;
constexpr auto kSweepInterval = std::chrono::milliseconds(50);
constexpr auto kConnectAttempt = std::chrono::seconds(1);
constexpr auto kRetryPause = std::chrono::milliseconds(50);

using Nonce = std::array<uint8_t, 32>;

// Payload limits per handshake step. A kind the step does not expect may
// still carry a handshake's worth, so the refusal can say what it was.
const PayloadLimits kMemberNonceLimits{{{kMemberNonce, sizeof(uint32_t) + sizeof(Nonce)}}, kMaxHandshakeBytes};
const PayloadLimits kMemberProofLimits{{{kMemberProof, kMaxHandshakeBytes}}, kMaxHandshakeBytes};
const PayloadLimits kLeaderProofLimits{{{kLeaderProof, sizeof(Nonce) + sizeof(Sha256Digest)}}, kMaxHandshakeBytes};

// The welcome is the group table (encode_table) and its proof, so its bound
// follows the group's size: any world the deployments accept fits.
PayloadLimits welcome_limits(int32_t group_size) {
  const uint64_t per_rank = sizeof(int32_t) + sizeof(uint32_t) + kMaxNameBytes;
  const uint64_t table = sizeof(uint32_t) + static_cast<uint64_t>(group_size) * per_rank;
  return {{{kWelcome, table + sizeof(Sha256Digest)}, {kRefused, sizeof(uint32_t) + kMaxHandshakeBytes}},
          kMaxHandshakeBytes};
}

Result<Nonce> fresh_nonce() {
  Nonce nonce;
  size_t got = 0;
  while (got < nonce.size()) {
    const ssize_t n = ::getrandom(nonce.data() + got, nonce.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return failed_precondition(std::string("getrandom for a rendezvous nonce: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  return nonce;
}

std::span<const uint8_t> as_u8(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
}

// A MAC keyed with the job token over a label (which side, which message)
// and length-prefixed parts, so no two messages can be confused.
class Proof {
 public:
  Proof(const std::string& token, std::string_view label) : mac_(bytes_of(token)) { add(bytes_of(label)); }
  Proof& add(std::span<const uint8_t> part) {
    const uint32_t n = static_cast<uint32_t>(part.size());
    const uint8_t length[4] = {static_cast<uint8_t>(n), static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n >> 16),
                               static_cast<uint8_t>(n >> 24)};
    mac_.update(length);
    mac_.update(part);
    return *this;
  }
  Proof& add(std::string_view text) { return add(bytes_of(text)); }
  Sha256Digest finish() { return mac_.finish(); }

 private:
  HmacSha256 mac_;
};

Sha256Digest leader_proof(const RendezvousSettings& s, const Nonce& member, const Nonce& leader) {
  return Proof(s.job_token, "engramlab rendezvous 1: leader").add(s.job_id).add(s.tag).add(member).add(leader).finish();
}

Sha256Digest member_proof(const RendezvousSettings& s, const Nonce& member, const Nonce& leader,
                          std::span<const std::byte> claim) {
  return Proof(s.job_token, "engramlab rendezvous 1: member").add(member).add(leader).add(as_u8(claim)).finish();
}

Sha256Digest welcome_proof(const RendezvousSettings& s, const Nonce& member, const Nonce& leader,
                           std::span<const std::byte> table) {
  return Proof(s.job_token, "engramlab rendezvous 1: welcome").add(member).add(leader).add(as_u8(table)).finish();
}

// A payload followed by its 32-byte MAC.
std::vector<std::byte> with_proof(std::span<const std::byte> body, const Sha256Digest& proof) {
  ByteWriter w;
  w.put_bytes(body);
  w.put(proof);
  return std::move(w.bytes());
}

struct Proven {
  std::span<const std::byte> body;
  Sha256Digest proof{};
};

std::optional<Proven> split_proof(const std::vector<std::byte>& payload) {
  Sha256Digest proof;
  if (payload.size() < proof.size()) return std::nullopt;
  const size_t body_bytes = payload.size() - proof.size();
  std::memcpy(proof.data(), payload.data() + body_bytes, proof.size());
  return Proven{std::span(payload.data(), body_bytes), proof};
}

struct Claim {
  std::string tag, job_id, address;
  int32_t world_rank = -1, group_rank = -1, group_size = 0;
};

std::vector<std::byte> encode_claim(const Claim& c) {
  ByteWriter w;
  w.put_string(c.tag);
  w.put_string(c.job_id);
  w.put_string(c.address);
  w.put(c.world_rank);
  w.put(c.group_rank);
  w.put(c.group_size);
  return std::move(w.bytes());
}

std::optional<Claim> decode_claim(std::span<const std::byte> bytes) {
  ByteReader r(bytes.data(), bytes.size());
  auto tag = r.get_string(kMaxNameBytes), job = r.get_string(kMaxNameBytes), addr = r.get_string(kMaxNameBytes);
  auto wr = r.get<int32_t>(), gr = r.get<int32_t>(), gs = r.get<int32_t>();
  if (!tag || !job || !addr || !wr || !gr || !gs || !r.at_end()) return std::nullopt;
  return Claim{*tag, *job, *addr, *wr, *gr, *gs};
}

std::vector<std::byte> encode_table(const GroupTable& table) {
  ByteWriter w;
  w.put<uint32_t>(static_cast<uint32_t>(table.world_ranks.size()));
  for (size_t i = 0; i < table.world_ranks.size(); ++i) {
    w.put(table.world_ranks[i]);
    w.put_string(table.addresses[i]);
  }
  return std::move(w.bytes());
}

std::optional<GroupTable> decode_table(std::span<const std::byte> bytes) {
  ByteReader r(bytes.data(), bytes.size());
  auto n = r.get<uint32_t>();
  if (!n || *n > (1u << 20)) return std::nullopt;
  GroupTable table;
  for (uint32_t i = 0; i < *n; ++i) {
    auto wr = r.get<int32_t>();
    auto addr = r.get_string(kMaxNameBytes);
    if (!wr || !addr) return std::nullopt;
    table.world_ranks.push_back(*wr);
    table.addresses.push_back(*addr);
  }
  if (!r.at_end()) return std::nullopt;
  return table;
}

// ---------------------------------------------------------------------------
// Leader side.

class Admission {
 public:
  Admission(asio::io_context& io, tcp::acceptor& acceptor, const RendezvousSettings& settings,
            const std::vector<int>& world_ranks, std::vector<std::unique_ptr<tcp::socket>>& links,
            std::vector<std::string>& addresses)
      : io_(io), acceptor_(acceptor), settings_(settings), world_ranks_(world_ranks), links_(links),
        addresses_(addresses), sessions_(world_ranks.size()), sweep_timer_(io), accept_retry_timer_(io),
        group_size_(static_cast<int>(world_ranks.size())), me_(world_ranks.front()) {}

  // Accept and authenticate until everyone joined or the deadline; then
  // welcome them all.
  Status run() {
    if (group_size_ > 1) {
      accept_next();
      arm_sweep();
      run_until(io_, settings_.deadline, [this] { return stopped_; });
    }
    stop();
    drain(io_);
    log_refusal_summary();
    if (joined_ != group_size_ - 1) {
      close_links();
      return missing_ranks_error();
    }
    return welcome_everyone();
  }

  int refused() const { return refused_; }

 private:
  struct Candidate {
    explicit Candidate(asio::io_context& io) : socket(io) {}
    tcp::socket socket;
    std::string from = "an unknown address";
    Clock::time_point handshake_deadline;
    bool spoke = false;     // its nonce arrived: not one of a silent flood
    bool finished = false;  // refused with a reason that is being sent
    bool closed = false;
    Nonce member_nonce{}, leader_nonce{};
    Frame in, out;
  };
  using CandidatePtr = std::shared_ptr<Candidate>;
  struct Session {
    Nonce member_nonce{}, leader_nonce{};
  };

  // -- Accepting -------------------------------------------------------------

  void accept_next() {
    if (stopped_) return;
    auto c = std::make_shared<Candidate>(io_);
    acceptor_.async_accept(c->socket, [this, c](error_code ec) { on_accepted(c, ec); });
  }

  void on_accepted(const CandidatePtr& c, error_code ec) {
    if (stopped_ || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of fds, or a connection reset before we took it: the listener
      // stays, and accepting resumes shortly for the members still to come.
      if (ec == asio::error::no_descriptors || ec.value() == ENFILE) out_of_fds_ = describe_ec(ec);
      if (!accept_error_logged_) {
        accept_error_logged_ = true;
        std::fprintf(stderr, "engramlab: rank %d: accepting on group '%s' failed (%s); retrying\n", me_,
                     settings_.tag.c_str(), describe_ec(ec).c_str());
      }
      accept_retry_timer_.expires_after(kRetryPause);
      accept_retry_timer_.async_wait([this](error_code e) {
        if (!e) accept_next();
      });
      return;
    }
    error_code ignored;
    const tcp::endpoint remote = c->socket.remote_endpoint(ignored);
    if (!ignored) c->from = remote.address().to_string() + ":" + std::to_string(remote.port());
    make_room();
    c->handshake_deadline = Clock::now() + settings_.handshake_timeout;
    candidates_.push_back(c);
    read_member_nonce(c);
    accept_next();
  }

  // Holds the number of unauthenticated connections to the limit: the
  // oldest silent one goes first, else the oldest.
  void make_room() {
    while (static_cast<int>(candidates_.size()) >= settings_.max_pending_connections) {
      auto victim = std::find_if(candidates_.begin(), candidates_.end(), [](const CandidatePtr& c) { return !c->spoke; });
      if (victim == candidates_.end()) victim = candidates_.begin();
      const CandidatePtr c = *victim;
      if (c->finished) {
        close_candidate(c);
      } else {
        refuse(c, fmt::format("dropped: {} connections were waiting to authenticate, the most this rank holds",
                              settings_.max_pending_connections));
      }
    }
  }

  // -- The handshake, one step per message -----------------------------------

  void read_member_nonce(const CandidatePtr& c) {
    async_read_frame(c->socket, c->in, kMemberNonceLimits, [this, c](error_code ec) {
      if (c->closed || stopped_) return;
      if (is_oversized_frame(ec)) {
        return refuse(c, "not an engramlab rendezvous handshake (" +
                             oversized_frame_text(c->in.header, kMemberNonceLimits) + ")");
      }
      if (ec) return refuse(c, "no handshake (" + describe_ec(ec) + ")");
      ByteReader r(c->in.payload.data(), c->in.payload.size());
      const auto version = r.get<uint32_t>();
      const auto nonce = r.get<Nonce>();
      if (c->in.header.kind != kMemberNonce || !version || !nonce || !r.at_end()) {
        return refuse(c, "not an engramlab rendezvous handshake");
      }
      if (*version != kHandshakeVersion) {
        return refuse(c, fmt::format("handshake version {}, this rank speaks {}: every rank must run the same "
                                     "engramlab build",
                                     *version, kHandshakeVersion));
      }
      c->spoke = true;
      c->member_nonce = *nonce;
      send_leader_proof(c);
    });
  }

  void send_leader_proof(const CandidatePtr& c) {
    auto nonce = fresh_nonce();
    if (!nonce.is_ok()) return refuse(c, nonce.status().message());
    c->leader_nonce = nonce.value();
    ByteWriter w;
    w.put(c->leader_nonce);
    w.put(leader_proof(settings_, c->member_nonce, c->leader_nonce));
    c->out = make_frame(kLeaderProof, 0, me_, std::move(w.bytes()));
    async_write_frame(c->socket, c->out, [this, c](error_code ec) {
      if (c->closed || stopped_ || !ec) return;
      refuse(c, "closed during the handshake (" + describe_ec(ec) + ")");
    });
    read_member_proof(c);
  }

  void read_member_proof(const CandidatePtr& c) {
    async_read_frame(c->socket, c->in, kMemberProofLimits, [this, c](error_code ec) {
      if (c->closed || stopped_) return;
      if (is_oversized_frame(ec)) {
        return refuse(c, "not an engramlab rendezvous handshake (" +
                             oversized_frame_text(c->in.header, kMemberProofLimits) + ")");
      }
      if (ec == asio::error::eof || ec == asio::error::connection_reset) {
        return refuse(c, "left after our proof without proving it holds this job's token (a rank started with "
                         "another ENGRAMLAB_JOB_TOKEN or ENGRAMLAB_JOB_ID, or a stranger)");
      }
      if (ec) return refuse(c, "no claim (" + describe_ec(ec) + ")");
      check_member_proof(c);
    });
  }

  void check_member_proof(const CandidatePtr& c) {
    const auto proven = split_proof(c->in.payload);
    if (c->in.header.kind != kMemberProof || !proven) return refuse(c, "not an engramlab rendezvous handshake");
    if (!digests_equal(member_proof(settings_, c->member_nonce, c->leader_nonce, proven->body), proven->proof)) {
      return refuse(c, "wrong job token (its proof does not verify)");
    }
    // From here it holds the token: it is told why it is turned away.
    const auto claim = decode_claim(proven->body);
    if (!claim) return refuse_and_tell(c, "its claim is malformed");
    if (claim->job_id != settings_.job_id) {
      return refuse_and_tell(c, fmt::format("job id '{}' is not this job's ('{}')", claim->job_id, settings_.job_id));
    }
    if (claim->tag != settings_.tag) {
      return refuse_and_tell(c, fmt::format("it asked for group '{}', this is group '{}'", claim->tag, settings_.tag));
    }
    const int gr = claim->group_rank;
    if (claim->group_size != group_size_ || gr <= 0 || gr >= group_size_ ||
        world_ranks_[static_cast<size_t>(gr)] != claim->world_rank) {
      return refuse_and_tell(c, fmt::format("it claims rank {} as group rank {} of {}; this group has {} ranks",
                                            claim->world_rank, gr, claim->group_size, group_size_));
    }
    if (links_[static_cast<size_t>(gr)]) {
      return refuse_and_tell(c, fmt::format("rank {} already joined; two processes started as one rank?",
                                            claim->world_rank));
    }
    admit(c, *claim);
  }

  // -- Outcomes --------------------------------------------------------------

  void admit(const CandidatePtr& c, const Claim& claim) {
    const auto gr = static_cast<size_t>(claim.group_rank);
    sessions_[gr] = Session{c->member_nonce, c->leader_nonce};
    addresses_[gr] = claim.address;
    links_[gr] = std::make_unique<tcp::socket>(std::move(c->socket));
    c->closed = true;
    candidates_.remove(c);
    ++joined_;
    if (joined_ == group_size_ - 1) stop();
  }

  void log_refusal(const CandidatePtr& c, const std::string& why) {
    ++refused_;
    if (refused_ > kRefusalsLoggedOneByOne) return;
    std::fprintf(stderr, "engramlab: rank %d refused a connection to group '%s' from %s: %s; the job continues\n", me_,
                 settings_.tag.c_str(), c->from.c_str(), why.c_str());
  }

  void refuse(const CandidatePtr& c, const std::string& why) {
    if (c->closed || c->finished) return;
    log_refusal(c, why);
    close_candidate(c);
  }

  void refuse_and_tell(const CandidatePtr& c, const std::string& why) {
    log_refusal(c, why);
    c->finished = true;
    ByteWriter w;
    w.put_string(why);
    c->out = make_frame(kRefused, 0, me_, std::move(w.bytes()));
    // It stays counted among the pending until the reason is out (or its
    // handshake deadline passes).
    async_write_frame(c->socket, c->out, [this, c](error_code) {
      if (!stopped_) close_candidate(c);
    });
  }

  void close_candidate(const CandidatePtr& c) {
    if (c->closed) return;
    c->closed = true;
    error_code ignored;
    c->socket.close(ignored);
    candidates_.remove(c);
  }

  // -- Deadlines and the end -------------------------------------------------

  void arm_sweep() {
    sweep_timer_.expires_after(kSweepInterval);
    sweep_timer_.async_wait([this](error_code ec) {
      if (ec || stopped_) return;
      sweep_expired();
      arm_sweep();
    });
  }

  void sweep_expired() {
    const auto now = Clock::now();
    std::vector<CandidatePtr> expired;
    for (const CandidatePtr& c : candidates_)
      if (now >= c->handshake_deadline) expired.push_back(c);
    for (const CandidatePtr& c : expired) {
      if (c->finished) {
        close_candidate(c);
      } else {
        refuse(c, fmt::format("no complete handshake within {} ms", settings_.handshake_timeout.count()));
      }
    }
  }

  void stop() {
    if (stopped_) return;
    stopped_ = true;
    error_code ignored;
    acceptor_.close(ignored);
    sweep_timer_.cancel();
    accept_retry_timer_.cancel();
    for (const CandidatePtr& c : candidates_) {
      c->closed = true;
      c->socket.close(ignored);
    }
    candidates_.clear();
  }

  void close_links() {
    error_code ignored;
    for (auto& link : links_)
      if (link) link->close(ignored);
  }

  void log_refusal_summary() const {
    if (refused_ <= kRefusalsLoggedOneByOne) return;
    std::fprintf(stderr, "engramlab: rank %d refused %d more connections to group '%s' (not logged one by one)\n", me_,
                 refused_ - kRefusalsLoggedOneByOne, settings_.tag.c_str());
  }

  Status missing_ranks_error() const {
    std::vector<int> missing;
    for (int gr = 1; gr < group_size_; ++gr)
      if (!links_[static_cast<size_t>(gr)]) missing.push_back(world_ranks_[static_cast<size_t>(gr)]);
    if (!out_of_fds_.empty()) {
      // They may well have come: it was this leader that could not take them.
      const Status exhausted = fd_exhausted(
          fmt::format("rank {}, the leader of group '{}' ({} ranks), could not accept ranks {}", me_, settings_.tag,
                      group_size_, compress_ranges(missing)),
          out_of_fds_);
      return Status(exhausted.code(), exhausted.message(), {.rank = me_, .step = "rendezvous"});
    }
    std::string message = fmt::format(
        "group '{}': waited {} ms, ranks {} never joined (not started, crashed, wrong MASTER_ADDR/MASTER_PORT, or "
        "a different ENGRAMLAB_JOB_TOKEN/ENGRAMLAB_JOB_ID)",
        settings_.tag, settings_.join_timeout.count(), compress_ranges(missing));
    if (refused_ > 0) {
      message += fmt::format("; meanwhile {} connection(s) that did not authenticate were turned away{}", refused_,
                             refused_ > settings_.max_pending_connections ? " (a connection flood on this port?)" : "");
    }
    return Status(ErrorCode::kUnavailable, message, {.rank = me_, .step = "rendezvous"});
  }

  Status welcome_everyone() {
    GroupTable table;
    for (int gr = 0; gr < group_size_; ++gr) {
      table.world_ranks.push_back(world_ranks_[static_cast<size_t>(gr)]);
      table.addresses.push_back(addresses_[static_cast<size_t>(gr)]);
    }
    const std::vector<std::byte> body = encode_table(table);
    std::vector<Frame> frames(static_cast<size_t>(group_size_));
    int writes = 0;
    error_code first;
    int failed_gr = -1;
    for (int gr = 1; gr < group_size_; ++gr) {
      const Session& s = sessions_[static_cast<size_t>(gr)];
      frames[static_cast<size_t>(gr)] =
          make_frame(kWelcome, 0, me_, with_proof(body, welcome_proof(settings_, s.member_nonce, s.leader_nonce, body)));
      ++writes;
      async_write_frame(*links_[static_cast<size_t>(gr)], frames[static_cast<size_t>(gr)], [&, gr](error_code ec) {
        --writes;
        if (ec && !first) first = ec, failed_gr = gr;
      });
    }
    const auto deadline = std::max(settings_.deadline, Clock::now() + settings_.handshake_timeout);
    if (!run_bounded(io_, deadline, writes) || first) {
      close_links();
      drain(io_);
      const int peer = failed_gr > 0 ? world_ranks_[static_cast<size_t>(failed_gr)] : -1;
      return Status(ErrorCode::kUnavailable,
                    fmt::format("group '{}': welcoming rank {} failed: {}", settings_.tag, peer,
                                first ? describe_ec(first) : std::string("timed out")),
                    {.rank = me_, .peer = peer, .step = "rendezvous"});
    }
    return Status::ok();
  }

  asio::io_context& io_;
  tcp::acceptor& acceptor_;
  const RendezvousSettings& settings_;
  const std::vector<int>& world_ranks_;
  std::vector<std::unique_ptr<tcp::socket>>& links_;
  std::vector<std::string>& addresses_;
  std::vector<Session> sessions_;  // by group rank
  std::list<CandidatePtr> candidates_;
  asio::steady_timer sweep_timer_;
  asio::steady_timer accept_retry_timer_;
  const int group_size_;
  const int me_;
  int joined_ = 0;
  int refused_ = 0;
  bool stopped_ = false;
  bool accept_error_logged_ = false;
  std::string out_of_fds_;  // accepting failed with EMFILE/ENFILE: the cause to name
};

// ---------------------------------------------------------------------------
// Member side.

class MemberJoin {
 public:
  MemberJoin(asio::io_context& io, const std::string& host, uint16_t port, const RendezvousSettings& settings,
             const MemberClaim& claim, int leader_world_rank, std::unique_ptr<tcp::socket>& link)
      : io_(io), host_(host), port_(port), settings_(settings), claim_(claim), leader_(leader_world_rank), link_(link),
        where_(fmt::format("rank {} at {}:{}", leader_world_rank, host, port)) {}

  // Tries connections until one is welcomed, a failure that retrying
  // cannot mend, or the deadline.
  Result<GroupTable> run() {
    tcp::resolver resolver(io_);
    error_code ec;
    const auto endpoints = resolver.resolve(host_, std::to_string(port_), ec);
    if (ec) {
      return fail(ErrorCode::kInvalidArgument, fmt::format("cannot resolve MASTER_ADDR '{}': {}", host_, ec.message()));
    }
    for (;;) {
      ++attempts_;
      ENGRAM_ASSIGN_OR_RETURN(const Step step, attempt(endpoints));
      if (step == Step::kJoined) return std::move(*table_);
      close_link();
      if (Clock::now() + kRetryPause >= settings_.deadline) return gave_up();
      std::this_thread::sleep_for(kRetryPause);
    }
  }

 private:
  enum class Step { kRetry, kJoined };

  Result<Step> attempt(const tcp::resolver::results_type& endpoints) {
    ENGRAM_ASSIGN_OR_RETURN(const bool connected, connect(endpoints));
    if (!connected) return Step::kRetry;
    ENGRAM_ASSIGN_OR_RETURN(const bool leader_proven, authenticate_leader());
    if (!leader_proven) return Step::kRetry;
    return present_claim();
  }

  // False (with the reason kept) when the leader is not reachable yet.
  // Each endpoint's socket is opened here, not by Asio's range connect: that
  // one reports a socket it could not open (EMFILE) as operation_aborted,
  // which read as "try again" until the join timeout. Out of descriptors is
  // resource_exhausted naming RLIMIT_NOFILE, and not retried.
  Result<bool> connect(const tcp::resolver::results_type& endpoints) {
    error_code connect_ec = asio::error::host_not_found;
    for (const auto& entry : endpoints) {
      link_ = std::make_unique<tcp::socket>(io_);
      error_code open_ec;
      link_->open(entry.endpoint().protocol(), open_ec);
      if (open_ec) {
        close_link();
        const int err = open_ec.value();
        if (err == EMFILE || err == ENFILE) {
          const Status exhausted =
              fd_exhausted(fmt::format("rank {} opening a socket to {}", claim_.world_rank, where_), open_ec.message());
          return fail(exhausted.code(), exhausted.message());
        }
        connect_ec = open_ec;
        continue;
      }
      int pending = 1;
      link_->async_connect(entry.endpoint(), [&](error_code e) {
        connect_ec = e;
        --pending;
      });
      if (!run_bounded(io_, std::min(settings_.deadline, Clock::now() + kConnectAttempt), pending)) {
        close_link();
        connect_ec = asio::error::timed_out;
      }
      if (!connect_ec) return true;
      close_link();
    }
    if (leader_proven_once_ && connect_ec == asio::error::connection_refused) {
      return fail(ErrorCode::kUnavailable,
                  fmt::format("{} closed our connection during the rendezvous and no longer listens: it died or "
                              "exited, and this group cannot form",
                              where_));
    }
    last_problem_ = connect_ec.message();
    return false;
  }

  // Our nonce out, the leader's proof back. False when the connection
  // ended before the proof (the leader may take a later one).
  Result<bool> authenticate_leader() {
    ENGRAM_ASSIGN_OR_RETURN(member_nonce_, fresh_nonce());
    ByteWriter w;
    w.put<uint32_t>(kHandshakeVersion);
    w.put(member_nonce_);
    const Frame out = make_frame(kMemberNonce, 0, claim_.world_rank, std::move(w.bytes()));
    Frame in;
    const auto handshake_deadline = std::min(settings_.deadline, Clock::now() + settings_.handshake_timeout);
    error_code read_ec;
    if (!exchange(out, in, kLeaderProofLimits, handshake_deadline, read_ec)) {
      last_problem_ = fmt::format("it accepted the connection but gave no handshake within {} ms",
                                  settings_.handshake_timeout.count());
      return false;
    }
    if (read_ec && !is_protocol_error(read_ec)) {
      last_problem_ = fmt::format("it closed the connection before proving it holds the job token ({}): it is "
                                  "restarting, or turning away a flood of connections",
                                  describe_ec(read_ec));
      return false;
    }
    ByteReader r(in.payload.data(), in.payload.size());
    const auto leader_nonce = r.get<Nonce>();
    const auto proof = r.get<Sha256Digest>();
    if (read_ec || in.header.kind != kLeaderProof || !leader_nonce || !proof || !r.at_end()) {
      return fail(ErrorCode::kPermissionDenied,
                  fmt::format("{} answered with bytes that are not an engramlab leader's handshake: another "
                              "program holds MASTER_PORT, or it runs another engramlab build. Nothing "
                              "job-specific was sent to it",
                              where_));
    }
    if (!digests_equal(leader_proof(settings_, member_nonce_, *leader_nonce), *proof)) {
      return fail(ErrorCode::kPermissionDenied,
                  fmt::format("{} failed authentication: its proof does not match our ENGRAMLAB_JOB_TOKEN and "
                              "ENGRAMLAB_JOB_ID. Either the ranks were started with different tokens or job ids "
                              "(every rank needs the same), or a process that is not this job's leader holds the "
                              "port. Nothing job-specific was sent to it",
                              where_));
    }
    leader_nonce_ = *leader_nonce;
    leader_proven_once_ = true;
    return true;
  }

  // Our claim out; the welcome (once every rank joined) or a refusal back.
  Result<Step> present_claim() {
    error_code ec;
    Claim claim{settings_.tag, settings_.job_id, link_->local_endpoint(ec).address().to_string(),
                claim_.world_rank, claim_.group_rank, claim_.group_size};
    const std::vector<std::byte> body = encode_claim(claim);
    const Frame out = make_frame(kMemberProof, 0, claim_.world_rank,
                                 with_proof(body, member_proof(settings_, member_nonce_, leader_nonce_, body)));
    Frame in;
    error_code read_ec;
    const PayloadLimits limits = welcome_limits(claim_.group_size);
    if (!exchange(out, in, limits, settings_.deadline, read_ec)) {
      return fail(ErrorCode::kUnavailable,
                  fmt::format("{} authenticated us but did not welcome us within the join timeout ({} ms): other "
                              "ranks never arrived",
                              where_, settings_.join_timeout.count()));
    }
    if (read_ec && !is_protocol_error(read_ec)) {
      // Dropped before it checked our claim, or it died: a reconnect tells.
      last_problem_ = fmt::format("it closed our connection after authenticating ({})", describe_ec(read_ec));
      return Step::kRetry;
    }
    if (!read_ec && in.header.kind == kRefused) {
      ByteReader r(in.payload.data(), in.payload.size());
      const auto why = r.get_string(kMaxHandshakeBytes);
      return fail(ErrorCode::kPermissionDenied,
                  fmt::format("{} refused us: {}", where_, why ? *why : std::string("no reason given")));
    }
    if (is_oversized_frame(read_ec)) {
      return fail(ErrorCode::kInternal, fmt::format("protocol error: {} sent {} in answer to our claim", where_,
                                                    oversized_frame_text(in.header, limits)));
    }
    const auto proven = split_proof(in.payload);
    if (read_ec || in.header.kind != kWelcome || !proven) {
      return fail(ErrorCode::kInternal, fmt::format("{} sent a malformed welcome", where_));
    }
    if (!digests_equal(welcome_proof(settings_, member_nonce_, leader_nonce_, proven->body), proven->proof)) {
      return fail(ErrorCode::kPermissionDenied,
                  fmt::format("{}'s welcome does not verify with the job token: the connection was tampered with",
                              where_));
    }
    auto table = decode_table(proven->body);
    if (!table || table->world_ranks.size() != static_cast<size_t>(claim_.group_size)) {
      return fail(ErrorCode::kInternal, fmt::format("{} sent a malformed welcome", where_));
    }
    table_ = std::move(*table);
    return Step::kJoined;
  }

  // Writes `out` and reads one frame into `in`; false on the deadline (the
  // link is closed then). A read error lands in `read_ec`.
  bool exchange(const Frame& out, Frame& in, const PayloadLimits& limits, Clock::time_point deadline,
                error_code& read_ec) {
    int pending = 2;
    error_code write_ec;
    async_write_frame(*link_, out, [&](error_code e) {
      write_ec = e;
      --pending;
    });
    async_read_frame(*link_, in, limits, [&](error_code e) {
      read_ec = e;
      --pending;
    });
    if (!run_bounded(io_, deadline, pending)) {
      close_link();
      drain(io_);
      return false;
    }
    if (!read_ec && write_ec) read_ec = write_ec;
    return true;
  }

  void close_link() {
    if (!link_) return;
    error_code ignored;
    link_->close(ignored);
    drain(io_);
    link_.reset();
  }

  Status gave_up() const {
    return fail(ErrorCode::kUnavailable,
                fmt::format("cannot join {}: {} ({} attempts in {} ms). Not started, dead, wrong "
                            "MASTER_ADDR/MASTER_PORT, another host's network cannot reach it, or it is flooded "
                            "with connections",
                            where_, last_problem_, attempts_, settings_.join_timeout.count()));
  }

  Status fail(ErrorCode code, std::string message) const {
    return Status(code, std::move(message), {.rank = claim_.world_rank, .peer = leader_, .step = "rendezvous"});
  }

  asio::io_context& io_;
  const std::string host_;
  const uint16_t port_;
  const RendezvousSettings& settings_;
  const MemberClaim claim_;
  const int leader_;
  std::unique_ptr<tcp::socket>& link_;
  const std::string where_;
  Nonce member_nonce_{}, leader_nonce_{};
  bool leader_proven_once_ = false;
  std::string last_problem_ = "no attempt";
  int attempts_ = 0;
  std::optional<GroupTable> table_;
};

}  // namespace

Status admit_members(asio::io_context& io, tcp::acceptor& acceptor, const RendezvousSettings& settings,
                     const std::vector<int>& world_ranks, std::vector<std::unique_ptr<tcp::socket>>& links,
                     std::vector<std::string>& addresses, int& refused) {
  ENGRAM_CHECK(!world_ranks.empty() && links.size() == world_ranks.size() && addresses.size() == world_ranks.size());
  ENGRAM_CHECK(settings.max_pending_connections >= 1);
  Admission admission(io, acceptor, settings, world_ranks, links, addresses);
  Status status = admission.run();
  refused += admission.refused();
  return status;
}

Result<GroupTable> join_leader(asio::io_context& io, const std::string& host, uint16_t port,
                               const RendezvousSettings& settings, const MemberClaim& claim, int leader_world_rank,
                               std::unique_ptr<tcp::socket>& link) {
  ENGRAM_CHECK(claim.group_rank > 0 && claim.group_rank < claim.group_size);
  MemberJoin join(io, host, port, settings, claim, leader_world_rank, link);
  return join.run();
}

}  // namespace engram::ipc
