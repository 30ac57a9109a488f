// The GPU tests' row-sharded peer table: LocalPeerShards
// (shards of this process's GPUs mapped into each other), each shard filled
// either from a host copy of the whole table (small tables) or on its own GPU
// by the bench's fill kernel (tables too big for a host copy; the expected
// rows then come from operator_checks::fill_word on the CPU).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <vector>

#include "tests/gpu/local_peer_shards.h"
#include "operator_checks/bench_kernels.h"

namespace engram::gpu_test {

class PeerShards : public LocalPeerShards {
 public:
  using LocalPeerShards::LocalPeerShards;

  // Creates, fills from `table` (all rows, row-major), exports, imports and
  // maps. On failure whatever was built is torn down by the destructor.
  Status build(const std::vector<uint8_t>& table) {
    ENGRAM_CHECK(table.size() == static_cast<uint64_t>(layout().row_count()) * row_bytes());
    return LocalPeerShards::build([&](int g, DevicePtr shard) {
      const uint64_t begin = static_cast<uint64_t>(layout().shard_begin(g)) * row_bytes();
      const uint64_t bytes = static_cast<uint64_t>(layout().shard_rows(g)) * row_bytes();
      return memory(g).copy_to_device(shard, std::span(reinterpret_cast<const std::byte*>(table.data()) + begin, bytes));
    });
  }

  // Same, each shard filled on its GPU with operator_checks::fill_shard(seed, dim):
  // row r word w is operator_checks::fill_word(seed, r, w, row_bytes(), dim).
  Status build_filled_on_device(uint64_t seed, int dim) {
    ENGRAM_CHECK(row_bytes() % 8 == 0 && dim > 0);
    return LocalPeerShards::build([&](int g, DevicePtr shard) -> Status {
      const cudaError_t set = cudaSetDevice(g);
      if (set != cudaSuccess) {
        return Status(ErrorCode::kInternal, std::string("cudaSetDevice: ") + cudaGetErrorName(set),
                      ErrorContext{.rank = g, .peer = -1, .step = "fill"});
      }
      operator_checks::ShardFillArgs fill;
      fill.shard = reinterpret_cast<uint8_t*>(shard);
      fill.first_row = layout().shard_begin(g);
      fill.rows = layout().shard_rows(g);
      fill.row_bytes = row_bytes();
      fill.dim = dim;
      fill.seed = seed;
      return operator_checks::fill_shard(fill, nullptr).with_context(g, -1, "fill");
    });
  }
};

}  // namespace engram::gpu_test
