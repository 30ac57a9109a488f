#include "backends/ipc/tcp_frames.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

namespace engram::ipc {

Frame make_frame(uint32_t kind, uint64_t seq, int origin, std::vector<std::byte> payload) {
  Frame f;
  f.header.kind = kind;
  f.header.seq = seq;
  f.header.origin = origin;
  f.header.payload_bytes = payload.size();
  f.payload = std::move(payload);
  return f;
}

uint64_t PayloadLimits::limit_for(uint32_t kind) const {
  for (const auto& [k, bytes] : kinds)
    if (k == kind) return bytes;
  return other_kinds_bytes;
}

namespace {

// The first read takes at most this much; each later one at most what
// arrived so far, so memory follows the bytes a peer really sent.
constexpr size_t kFirstPayloadChunkBytes = size_t{64} << 10;

void async_read_payload(tcp::socket& socket, Frame& frame, size_t have, std::function<void(error_code)> done) {
  const size_t want = static_cast<size_t>(frame.header.payload_bytes);
  if (have == want) return done(error_code{});
  const size_t chunk = std::min(want - have, std::max(kFirstPayloadChunkBytes, have));
  frame.payload.resize(have + chunk);
  asio::async_read(socket, asio::buffer(frame.payload.data() + have, chunk),
                   [&socket, &frame, have, chunk, done = std::move(done)](error_code ec, size_t) mutable {
                     if (ec) return done(ec);
                     async_read_payload(socket, frame, have + chunk, std::move(done));
                   });
}

}  // namespace

void async_read_frame(tcp::socket& socket, Frame& frame, const PayloadLimits& limits,
                      std::function<void(error_code)> done) {
  frame.payload.clear();
  asio::async_read(socket, asio::buffer(&frame.header, sizeof(FrameHeader)),
                   [&socket, &frame, limits, done = std::move(done)](error_code ec, size_t) mutable {
                     if (ec) return done(ec);
                     if (frame.header.magic != kFrameMagic) {
                       return done(boost::system::errc::make_error_code(boost::system::errc::protocol_error));
                     }
                     if (frame.header.payload_bytes > limits.limit_for(frame.header.kind)) {
                       return done(boost::system::errc::make_error_code(boost::system::errc::message_size));
                     }
                     async_read_payload(socket, frame, 0, std::move(done));
                   });
}

void async_write_frame(tcp::socket& socket, const Frame& frame, std::function<void(error_code)> done) {
  std::array<asio::const_buffer, 2> buffers{asio::buffer(&frame.header, sizeof(FrameHeader)),
                                            asio::buffer(frame.payload)};
  asio::async_write(socket, buffers, [done](error_code ec, size_t) { done(ec); });
}

bool run_until(asio::io_context& io, Clock::time_point deadline, const std::function<bool()>& finished) {
  io.restart();
  while (!finished()) {
    if (io.run_one_until(deadline) == 0) break;
  }
  return finished();
}

bool run_bounded(asio::io_context& io, Clock::time_point deadline, const int& pending) {
  return run_until(io, deadline, [&pending] { return pending <= 0; });
}

void drain(asio::io_context& io) {
  io.restart();
  io.run();
}

std::string describe_ec(const error_code& ec) {
  if (ec == asio::error::eof) return "end of file";
  return ec.message();
}

bool is_protocol_error(const error_code& ec) {
  return ec == boost::system::errc::make_error_code(boost::system::errc::protocol_error) || is_oversized_frame(ec);
}

bool is_oversized_frame(const error_code& ec) {
  return ec == boost::system::errc::make_error_code(boost::system::errc::message_size);
}

std::string frame_kind_name(uint32_t kind) {
  switch (kind) {
    case kMemberNonce: return "member nonce";
    case kLeaderProof: return "leader proof";
    case kMemberProof: return "member proof";
    case kWelcome: return "welcome";
    case kRefused: return "refusal";
    case kOpAllGather: return "all_gather";
    case kOpReduceScatter: return "reduce_scatter";
    case kOpAllToAll: return "all_to_all";
    case kOpBarrier: return "barrier";
    case kOpSplit: return "split";
    case kResult: return "result";
    case kError: return "error";
    default: return "kind " + std::to_string(kind);
  }
}

std::string oversized_frame_text(const FrameHeader& header, const PayloadLimits& limits) {
  return fmt::format("a frame of kind {} claiming {} bytes, more than the {} bytes it may carry",
                     frame_kind_name(header.kind),
                     header.payload_bytes, limits.limit_for(header.kind));
}

}  // namespace engram::ipc
