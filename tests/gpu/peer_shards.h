// The GPU tests' row-sharded peer table: backends/cuda's LocalPeerShards
// (shards of this process's GPUs mapped into each other), each shard filled
// from a host copy of the whole table.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "backends/cuda/local_peer_shards.h"

namespace engram::gpu_test {

class PeerShards : public cuda::LocalPeerShards {
 public:
  using cuda::LocalPeerShards::LocalPeerShards;

  // Creates, fills from `table` (all rows, row-major), exports, imports and
  // maps. On failure whatever was built is torn down by the destructor.
  Status build(const std::vector<uint8_t>& table) {
    ENGRAM_CHECK(table.size() == static_cast<uint64_t>(layout().row_count()) * row_bytes());
    return cuda::LocalPeerShards::build([&](int g, DevicePtr shard) {
      const uint64_t begin = static_cast<uint64_t>(layout().shard_begin(g)) * row_bytes();
      const uint64_t bytes = static_cast<uint64_t>(layout().shard_rows(g)) * row_bytes();
      return memory(g).copy_to_device(shard, std::span(reinterpret_cast<const std::byte*>(table.data()) + begin, bytes));
    });
  }
};

}  // namespace engram::gpu_test
