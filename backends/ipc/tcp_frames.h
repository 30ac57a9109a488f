// The framing both halves of the TCP collectives speak: a fixed header
// (magic, kind, sequence, length, origin rank) and a payload, read and
// written with Boost.Asio, plus the bounded event-loop runs every wait uses.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace engram::ipc {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using error_code = boost::system::error_code;

inline constexpr uint32_t kFrameMagic = 0x45434F4C;  // "ECOL"

enum FrameKind : uint32_t {
  // The rendezvous handshake (tcp_rendezvous.h).
  kMemberNonce = 1,
  kLeaderProof = 2,
  kMemberProof = 3,
  kWelcome = 4,
  kRefused = 5,
  // Collective rounds.
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

Frame make_frame(uint32_t kind, uint64_t seq, int origin, std::vector<std::byte> payload);

// The most payload a reader takes for each frame kind it expects; any other
// kind may carry at most `other_kinds_bytes`.
struct PayloadLimits {
  std::vector<std::pair<uint32_t, uint64_t>> kinds;  // (kind, max payload bytes)
  uint64_t other_kinds_bytes = 0;
  uint64_t limit_for(uint32_t kind) const;
};

// A header with the wrong magic completes with errc::protocol_error, one
// whose payload is above its kind's limit with errc::message_size, before
// anything more is read (is_protocol_error holds for both). The payload
// buffer grows as bytes arrive (at most doubling what came), never to what
// a header merely claims.
void async_read_frame(tcp::socket& socket, Frame& frame, const PayloadLimits& limits,
                      std::function<void(error_code)> done);
void async_write_frame(tcp::socket& socket, const Frame& frame, std::function<void(error_code)> done);

// Runs handlers until `finished()` holds or the deadline passes; true when
// it holds.
bool run_until(asio::io_context& io, Clock::time_point deadline, const std::function<bool()>& finished);
// Runs handlers until `pending` reaches zero or the deadline passes.
bool run_bounded(asio::io_context& io, Clock::time_point deadline, const int& pending);
// After cancelling or closing everything: lets the aborted handlers run.
void drain(asio::io_context& io);

std::string describe_ec(const error_code& ec);
bool is_protocol_error(const error_code& ec);
bool is_oversized_frame(const error_code& ec);
// "all_gather", "welcome", ...; "kind <n>" for a number we do not speak.
std::string frame_kind_name(uint32_t kind);
// For messages after an oversized frame: "a frame of kind welcome claiming N
// bytes, more than the M bytes it may carry".
std::string oversized_frame_text(const FrameHeader& header, const PayloadLimits& limits);

}  // namespace engram::ipc
