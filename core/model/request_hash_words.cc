#include "core/model/request_hash_words.h"

#include "core/base/check.h"
#include "core/model/hashing.h"

namespace engram {

std::vector<DeviceHashHead> device_hash_heads(const TableHasher& hasher) {
  std::vector<DeviceHashHead> heads(static_cast<size_t>(hasher.head_count()));
  for (size_t j = 0; j < heads.size(); ++j) {
    const int64_t prime = hasher.primes()[j];
    ENGRAM_CHECK(prime >= 1);
    heads[j] = DeviceHashHead{prime, ~uint64_t{0} / static_cast<uint64_t>(prime), hasher.offsets()[j],
                              hasher.head_orders()[j]};
  }
  return heads;
}

}  // namespace engram
