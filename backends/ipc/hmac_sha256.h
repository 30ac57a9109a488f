// HMAC-SHA-256 (FIPS 180-4, RFC 2104) for the rendezvous handshake: ranks
// prove they hold the job token by a MAC over fresh nonces, so the token
// itself never crosses the network. Written here rather than linked because
// the GPU machines lack OpenSSL's headers; tests check the RFC 4231 vectors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace engram::ipc {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(std::span<const uint8_t> bytes);
  Sha256Digest finish();

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Sha256Digest sha256(std::span<const uint8_t> bytes);

// Keyed with the job token; fed the message in parts.
class HmacSha256 {
 public:
  explicit HmacSha256(std::span<const uint8_t> key);
  void update(std::span<const uint8_t> bytes);
  Sha256Digest finish();

 private:
  Sha256 inner_;
  std::array<uint8_t, 64> outer_key_{};
};

Sha256Digest hmac_sha256(std::span<const uint8_t> key, std::span<const uint8_t> message);

// Equal in time independent of where the digests differ.
bool digests_equal(const Sha256Digest& a, const Sha256Digest& b);

inline std::span<const uint8_t> bytes_of(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

}  // namespace engram::ipc
