// The words a device request hasher keeps in device memory and reads
// (core/lookup/device_request_hasher.h writes them; kernels/request_hash.cu
// and its CPU reference, kernels/request_hash_reference.h, read them): a
// table's hashing as one record per head, a request's run and a commit
// widened to int64 words (no padding bytes), the error word, and the modulo
// by a reciprocal both the CPU and the GPU compile. Plain C++17 (nvcc
// includes it).
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/host_device.h"

namespace engram {

class TableHasher;  // core/model/hashing.h

// Slots a device hasher keeps (its kernel marks the slots a step advances
// in a shared-memory bitmap of this many bits).
inline constexpr int kMaxDeviceRequestSlots = 8192;

// Head j of a table: row = floor_mod(mix of its order, prime) + offset.
// reciprocal = UINT64_MAX / prime (mod_by_reciprocal below).
struct DeviceHashHead {
  int64_t prime = 0;
  uint64_t reciprocal = 0;
  int64_t offset = 0;
  int64_t order = 0;
};
static_assert(sizeof(DeviceHashHead) == 32);

// A RequestRun of a real slot (idle runs and empty runs are not sent: their
// tokens are padding, DEAD either way).
struct DeviceRunWords {
  int64_t slot = 0;
  int64_t token_begin = 0;
  int64_t token_count = 0;
};
static_assert(sizeof(DeviceRunWords) == 24);

// A VerifyCommit.
struct DeviceCommitWords {
  int64_t slot = 0;
  int64_t accepted_drafts = 0;
};
static_assert(sizeof(DeviceCommitWords) == 16);

// The error word: the smallest bad input the steps found since the host
// last read it, as (code << 56) | index, so every implementation (kernel,
// emulator) reports the same one whatever order its threads ran in.
// kNoDeviceHashError: none. The host reads and clears it
// (DeviceRequestHasher::check_device_errors).
inline constexpr uint64_t kNoDeviceHashError = ~uint64_t{0};
enum class DeviceHashErrorCode : uint8_t {
  kRunCount = 1,     // index 0: the step's run count outside [0, slot_count]: no run hashed or advanced
  kRun = 2,          // index: the run (empty, slot out of range, past the tokens, not after the run before):
                     // not hashed, its slot not advanced
  kToken = 3,        // index: the token (outside the compressed vocabulary and not DEAD): taken as DEAD
                     // (lookback, history, pending block), its own ids DEAD
  kVerifyBlock = 4,  // index: the run (a verify block longer than verify_tokens_max): not stored
  kCommitCount = 5,  // index 0: the commit count outside [0, slot_count]: no commit applied
  kCommit = 6,       // index: the commit (slot out of range, or more drafts accepted than the block held):
                     // no commit of the step applied
};
inline constexpr uint64_t kDeviceHashErrorIndexMask = (uint64_t{1} << 56) - 1;
ENGRAM_HOST_DEVICE constexpr uint64_t device_hash_error(DeviceHashErrorCode code, uint64_t index) {
  return (static_cast<uint64_t>(code) << 56) | (index & kDeviceHashErrorIndexMask);
}
ENGRAM_HOST_DEVICE constexpr DeviceHashErrorCode device_hash_error_code(uint64_t error) {
  return static_cast<DeviceHashErrorCode>(error >> 56);
}
ENGRAM_HOST_DEVICE constexpr uint64_t device_hash_error_index(uint64_t error) {
  return error & kDeviceHashErrorIndexMask;
}

ENGRAM_HOST_DEVICE inline uint64_t mul_high_u64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
}

// x mod p for x < 2^63, p >= 1, reciprocal = UINT64_MAX / p: the quotient
// estimate floor(x * reciprocal / 2^64) is the true quotient or one less
// (x/2^64 and x/(p 2^64) are each below 1/2), so one correction makes it
// exact. A multiply-high instead of a 64-bit division (tens of
// instructions on a GPU). tests/request_hash_words_test.cc holds it to %.
ENGRAM_HOST_DEVICE inline uint64_t mod_by_reciprocal(uint64_t x, uint64_t p, uint64_t reciprocal) {
  uint64_t r = x - mul_high_u64(x, reciprocal) * p;
  if (r >= p) r -= p;
  return r;
}

// numpy's floor modulo of a mix by the head's prime, plus its offset: the
// row TableHasher::hash_run writes. A negative mix (only under the literal
// DEAD rule) takes the plain division.
ENGRAM_HOST_DEVICE inline int64_t head_row(int64_t mix, const DeviceHashHead& head) {
  int64_t r = 0;
  if (mix >= 0) {
    r = static_cast<int64_t>(mod_by_reciprocal(static_cast<uint64_t>(mix), static_cast<uint64_t>(head.prime), head.reciprocal));
  } else {
    r = mix % head.prime;
    if (r < 0) r += head.prime;
  }
  return r + head.offset;
}

// The records of a table's heads, in head order.
std::vector<DeviceHashHead> device_hash_heads(const TableHasher& hasher);

}  // namespace engram
