// Whether every byte of a buffer is one value, for tests that read back
// chunks their owners filled with one byte (tens of MiB a run). A memcmp of
// the buffer against itself one byte on, so the check stays fast in the
// unoptimized sanitizer build, where a loop over the bytes took over a minute.
#pragma once

#include <cstddef>
#include <cstring>
#include <span>

namespace engram::testing {

inline bool every_byte_is(std::span<const std::byte> bytes, std::byte value) {
  if (bytes.empty()) return true;
  // All bytes equal to the first (byte i == byte i + 1 for every i), and
  // the first is the value.
  return bytes[0] == value && std::memcmp(bytes.data(), bytes.data() + 1, bytes.size() - 1) == 0;
}

}  // namespace engram::testing
