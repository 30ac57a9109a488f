// Shards of one process's GPUs mapped into each other: a row-sharded table,
// the device_peer way (docs/design.md section 2), over every GPU this process
// drives. Each GPU's shard lives in POSIX-fd exportable VMM memory; it is
// exported as an fd, imported in-process by every other GPU, mapped there and
// access granted; each GPU then holds a device-resident peer table (shard
// starts + its mapped base of every shard). Test-only: the GPU tests drive
// every GPU's kernels from one process. Real runs (and `engramlab bench`)
// get their shards from the runtime, one process per GPU (core/exchange).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backends/cuda/cuda_device_memory.h"
#include "backends/cuda/gpu_buffer.h"
#include "core/backend/device_resources.h"
#include "core/lookup/shard_layout.h"

namespace engram::gpu_test {

using cuda::CudaDeviceMemory;
using cuda::GpuBuffer;

class LocalPeerShards {
 public:
  // Fills GPU `gpu`'s own shard, mapped at `shard` on that GPU (rows
  // layout().shard_begin(gpu) .. shard_end(gpu)). It may be asynchronous on
  // the GPU's default stream: build() synchronises every GPU after the fills.
  using Fill = std::function<Status(int gpu, DevicePtr shard)>;

  LocalPeerShards(int gpus, int64_t rows, uint64_t row_bytes);
  ~LocalPeerShards();
  LocalPeerShards(const LocalPeerShards&) = delete;
  LocalPeerShards& operator=(const LocalPeerShards&) = delete;

  // Opens the GPUs, creates, maps and fills every shard, checks P2P access
  // between every pair, exports, imports and maps the peers' shards, and
  // uploads the peer tables. On failure whatever was built is torn down by
  // teardown() or the destructor.
  Status build(const Fill& fill);
  // Importers unmap and release first, then the exporters. Returns the first
  // failure; carries on past it so that nothing leaks.
  Status teardown();

  CudaDeviceMemory& memory(int g) { return *memory_[static_cast<size_t>(g)]; }
  const RowShardLayout& layout() const { return layout_; }
  uint64_t row_bytes() const { return row_bytes_; }
  // Every GPU maps every shard at one size: the largest shard, rounded up to
  // the POSIX-fd VMM granularity.
  uint64_t allocation_bytes() const { return allocation_bytes_; }
  uint64_t granularity_bytes() const { return granularity_bytes_; }
  const int64_t* device_starts(int g) const { return starts_[static_cast<size_t>(g)].as<int64_t>(); }
  const void* const* device_bases(int g) const { return bases_[static_cast<size_t>(g)].as<const void* const>(); }
  // GPU g's address of shard s.
  const void* shard(int g, int s) const {
    return reinterpret_cast<const void*>(mapped_[static_cast<size_t>(g)][static_cast<size_t>(s)].address());
  }
  const void* own_shard(int g) const { return shard(g, g); }

 private:
  Status map_peer(int g, int peer);
  Status upload_peer_table(int g);

  RowShardLayout layout_;
  uint64_t row_bytes_;
  int gpus_;
  uint64_t granularity_bytes_ = 0;
  uint64_t allocation_bytes_ = 0;
  std::vector<std::unique_ptr<CudaDeviceMemory>> memory_;  // outlives mapped_, whose owners use it
  // [gpu][shard]: GPU g's own shard (s == g, created there) or its import of
  // GPU s's shard, each in a range of its own with access granted.
  std::vector<std::vector<MappedAllocation>> mapped_;
  std::vector<GpuBuffer> starts_;
  std::vector<GpuBuffer> bases_;
};

}  // namespace engram::gpu_test
