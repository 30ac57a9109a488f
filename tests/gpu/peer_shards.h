// A row-sharded table over this process's GPUs, the device_peer way: each
// GPU's shard in POSIX-fd exportable VMM memory, exported as an fd, imported
// and mapped by every other GPU, access granted, and a device-resident peer
// table (shard starts + mapped bases) per GPU. Real cross-process fd passing
// is backends/ipc's; here the fd is imported in-process on the other device.
#pragma once

#include <memory>
#include <vector>

#include "backends/cuda/cuda_device_memory.h"
#include "core/shard_layout.h"
#include "core/units.h"
#include "tests/gpu/gpu_test_support.h"

namespace engram::gpu_test {

class PeerShards {
 public:
  PeerShards(int gpus, int64_t rows, uint64_t row_bytes) : layout_(rows, gpus), row_bytes_(row_bytes), gpus_(gpus) {}
  ~PeerShards() { teardown().ignore(); }

  // Opens the GPUs, creates, fills, exports, imports and maps. On failure
  // whatever was built is torn down by the destructor.
  Status build(const std::vector<uint8_t>& table) {
    for (int g = 0; g < gpus_; ++g) {
      ENGRAM_ASSIGN_OR_RETURN(auto memory, cuda::CudaDeviceMemory::open(g));
      memory_.push_back(std::move(memory));
    }
    ENGRAM_ASSIGN_OR_RETURN(granularity_bytes_, memory_[0]->granularity(HandleType::kPosixFd));
    // Every rank maps every shard at one size: the largest, rounded up.
    allocation_bytes_ = round_up(static_cast<uint64_t>(layout_.max_shard_rows()) * row_bytes_, granularity_bytes_);
    mapped_.assign(static_cast<size_t>(gpus_), std::vector<Mapping>(static_cast<size_t>(gpus_)));
    for (int g = 0; g < gpus_; ++g) {
      ENGRAM_ASSIGN_OR_RETURN(AllocationHandle allocation, memory_[g]->create(allocation_bytes_, HandleType::kPosixFd));
      owned_.push_back(allocation);
      Mapping& own = mapped_[g][g];
      ENGRAM_ASSIGN_OR_RETURN(own.address, memory_[g]->reserve(allocation_bytes_));
      ENGRAM_RETURN_IF_ERROR(memory_[g]->map(own.address, allocation_bytes_, owned_[g]));
      own.mapped = true;
      ENGRAM_RETURN_IF_ERROR(memory_[g]->set_access(own.address, allocation_bytes_));
      const uint64_t begin = static_cast<uint64_t>(layout_.shard_begin(g)) * row_bytes_;
      const uint64_t bytes = static_cast<uint64_t>(layout_.shard_rows(g)) * row_bytes_;
      ENGRAM_RETURN_IF_ERROR(memory_[g]->copy_to_device(
          own.address, std::span(reinterpret_cast<const std::byte*>(table.data()) + begin, bytes)));
    }
    for (int g = 0; g < gpus_; ++g) {
      for (int peer = 0; peer < gpus_; ++peer) {
        if (peer == g) continue;
        ENGRAM_ASSIGN_OR_RETURN(ShareableHandle handle, memory_[peer]->export_handle(owned_[peer], HandleType::kPosixFd));
        auto imported = memory_[g]->import_handle(handle);
        ENGRAM_RETURN_IF_ERROR(memory_[g]->close_fd(handle.fd));
        if (!imported.is_ok()) return std::move(imported).take_status().with_context(g, peer, "import");
        Mapping& m = mapped_[g][peer];
        m.imported = *imported;
        m.has_import = true;
        ENGRAM_ASSIGN_OR_RETURN(m.address, memory_[g]->reserve(allocation_bytes_));
        ENGRAM_RETURN_IF_ERROR(memory_[g]->map(m.address, allocation_bytes_, m.imported).with_context(g, peer, "map"));
        m.mapped = true;
        ENGRAM_RETURN_IF_ERROR(memory_[g]->set_access(m.address, allocation_bytes_).with_context(g, peer, "access"));
      }
    }
    for (int g = 0; g < gpus_; ++g) {
      std::vector<const void*> bases;
      for (int s = 0; s < gpus_; ++s) bases.push_back(reinterpret_cast<const void*>(mapped_[g][s].address));
      starts_.emplace_back(g, layout_.starts().size() * sizeof(int64_t));
      bases_.emplace_back(g, bases.size() * sizeof(void*));
      if (starts_.back().get() == nullptr || bases_.back().get() == nullptr) return resource_exhausted("cudaMalloc peer table");
      if (cudaMemcpy(starts_.back().get(), layout_.starts().data(), starts_.back().bytes(), cudaMemcpyHostToDevice) !=
              cudaSuccess ||
          cudaMemcpy(bases_.back().get(), bases.data(), bases_.back().bytes(), cudaMemcpyHostToDevice) != cudaSuccess) {
        return internal_error("cudaMemcpy of the peer table failed");
      }
    }
    return Status::ok();
  }

  // Teardown order: importers unmap and release first, then the exporters.
  Status teardown() {
    Status first;
    auto keep = [&](Status s) { if (first.is_ok() && !s.is_ok()) first = std::move(s); };
    for (int g = 0; g < gpus_ && g < static_cast<int>(memory_.size()); ++g) {
      cudaSetDevice(g);
      cudaDeviceSynchronize();
    }
    starts_.clear();
    bases_.clear();
    for (int pass = 0; pass < 2; ++pass) {  // pass 0: peers' imports; pass 1: own shards
      for (size_t g = 0; g < mapped_.size(); ++g) {
        for (size_t s = 0; s < mapped_[g].size(); ++s) {
          if ((pass == 0) == (g == s)) continue;
          Mapping& m = mapped_[g][s];
          if (m.mapped) keep(memory_[g]->unmap(m.address, allocation_bytes_));
          m.mapped = false;
          if (m.has_import) keep(memory_[g]->release(m.imported));
          m.has_import = false;
          if (m.address != 0) keep(memory_[g]->free_reservation(m.address, allocation_bytes_));
          m.address = 0;
        }
      }
    }
    for (size_t g = 0; g < owned_.size(); ++g) keep(memory_[g]->release(owned_[g]));
    owned_.clear();
    mapped_.clear();
    return first;
  }

  cuda::CudaDeviceMemory& memory(int g) { return *memory_[static_cast<size_t>(g)]; }
  const RowShardLayout& layout() const { return layout_; }
  uint64_t allocation_bytes() const { return allocation_bytes_; }
  uint64_t granularity_bytes() const { return granularity_bytes_; }
  const int64_t* device_starts(int g) const { return starts_[static_cast<size_t>(g)].as<int64_t>(); }
  const void* const* device_bases(int g) const { return bases_[static_cast<size_t>(g)].as<const void* const>(); }
  const void* own_shard(int g) const { return reinterpret_cast<const void*>(mapped_[g][g].address); }

 private:
  struct Mapping {
    DevicePtr address = 0;
    AllocationHandle imported = 0;
    bool has_import = false;
    bool mapped = false;
  };
  RowShardLayout layout_;
  uint64_t row_bytes_;
  int gpus_;
  uint64_t granularity_bytes_ = 0;
  uint64_t allocation_bytes_ = 0;
  std::vector<std::unique_ptr<cuda::CudaDeviceMemory>> memory_;
  std::vector<AllocationHandle> owned_;
  std::vector<std::vector<Mapping>> mapped_;  // [gpu][shard]
  std::vector<DeviceBuffer> starts_;
  std::vector<DeviceBuffer> bases_;
};

}  // namespace engram::gpu_test
