#include "backends/ipc/tcp_frames.h"

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

void async_read_frame(tcp::socket& socket, Frame& frame, size_t max_payload_bytes,
                      std::function<void(error_code)> done) {
  asio::async_read(socket, asio::buffer(&frame.header, sizeof(FrameHeader)),
                   [&socket, &frame, max_payload_bytes, done](error_code ec, size_t) {
                     if (ec) return done(ec);
                     if (frame.header.magic != kFrameMagic || frame.header.payload_bytes > max_payload_bytes) {
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
  return ec == boost::system::errc::make_error_code(boost::system::errc::protocol_error);
}

}  // namespace engram::ipc
