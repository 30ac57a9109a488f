// SHA-256 against FIPS 180-4's examples and HMAC-SHA-256 against RFC 4231's
// test cases: the rendezvous proofs are only as good as these.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/ipc/hmac_sha256.h"

namespace engram::ipc {
namespace {

std::string hex(const Sha256Digest& d) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : d) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

std::vector<uint8_t> repeat(uint8_t byte, size_t n) { return std::vector<uint8_t>(n, byte); }

TEST(Sha256, FipsExamples) {
  EXPECT_EQ(hex(sha256(bytes_of(""))), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256(bytes_of("abc"))), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256(bytes_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // One million 'a', fed in uneven pieces: the block buffering must not matter.
  Sha256 h;
  const std::vector<uint8_t> piece = repeat('a', 997);
  size_t fed = 0;
  while (fed < 1000000) {
    const size_t n = std::min<size_t>(piece.size(), 1000000 - fed);
    h.update(std::span(piece.data(), n));
    fed += n;
  }
  EXPECT_EQ(hex(h.finish()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(HmacSha256, Rfc4231TestCases) {
  // Case 1.
  EXPECT_EQ(hex(hmac_sha256(repeat(0x0b, 20), bytes_of("Hi There"))),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Case 2: a key shorter than the block.
  EXPECT_EQ(hex(hmac_sha256(bytes_of("Jefe"), bytes_of("what do ya want for nothing?"))),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Case 3.
  EXPECT_EQ(hex(hmac_sha256(repeat(0xaa, 20), repeat(0xdd, 50))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Case 6: a key longer than the block is hashed first.
  EXPECT_EQ(hex(hmac_sha256(repeat(0xaa, 131), bytes_of("Test Using Larger Than Block-Size Key - Hash Key First"))),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(HmacSha256, DigestsCompareByValue) {
  const Sha256Digest a = sha256(bytes_of("x"));
  Sha256Digest b = a;
  EXPECT_TRUE(digests_equal(a, b));
  b[31] ^= 1;
  EXPECT_FALSE(digests_equal(a, b));
}

}  // namespace
}  // namespace engram::ipc
