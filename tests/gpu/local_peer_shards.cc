#include "tests/gpu/local_peer_shards.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <utility>

#include "core/base/units.h"

namespace engram::gpu_test {

using cuda::can_access_peer;
using cuda::cuda_runtime_status;

LocalPeerShards::LocalPeerShards(int gpus, int64_t rows, uint64_t row_bytes)
    : layout_(rows, gpus), row_bytes_(row_bytes), gpus_(gpus) {
  ENGRAM_CHECK(gpus >= 1 && row_bytes > 0);
}

LocalPeerShards::~LocalPeerShards() { teardown().ignore(); }

Status LocalPeerShards::build(const Fill& fill) {
  ENGRAM_CHECK(memory_.empty());  // one build per instance
  for (int g = 0; g < gpus_; ++g) {
    ENGRAM_ASSIGN_OR_RETURN(auto memory, CudaDeviceMemory::open(g));
    memory_.push_back(std::move(memory));
  }
  ENGRAM_ASSIGN_OR_RETURN(granularity_bytes_, memory_[0]->granularity(HandleType::kPosixFd));
  allocation_bytes_ = round_up(static_cast<uint64_t>(layout_.max_shard_rows()) * row_bytes_, granularity_bytes_);
  mapped_.resize(static_cast<size_t>(gpus_));
  for (auto& row : mapped_) row.resize(static_cast<size_t>(gpus_));
  for (int g = 0; g < gpus_; ++g) {
    MappedAllocation& own = mapped_[g][g];
    ENGRAM_ASSIGN_OR_RETURN(own, MappedAllocation::create(*memory_[g], allocation_bytes_, HandleType::kPosixFd));
    ENGRAM_RETURN_IF_ERROR(fill(g, own.address()));
  }
  for (int g = 0; g < gpus_; ++g) {
    ENGRAM_RETURN_IF_ERROR(cuda_runtime_status(cudaSetDevice(g), "cudaSetDevice", g, "fill"));
    ENGRAM_RETURN_IF_ERROR(
        cuda_runtime_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the shard fill", g, "fill"));
  }
  for (int g = 0; g < gpus_; ++g) {
    for (int peer = 0; peer < gpus_; ++peer) {
      if (peer != g) ENGRAM_RETURN_IF_ERROR(map_peer(g, peer));
    }
  }
  for (int g = 0; g < gpus_; ++g) ENGRAM_RETURN_IF_ERROR(upload_peer_table(g));
  return Status::ok();
}

Status LocalPeerShards::map_peer(int g, int peer) {
  ENGRAM_ASSIGN_OR_RETURN(auto can, can_access_peer(g, peer));
  if (!can) {
    return Status(ErrorCode::kFailedPrecondition,
                  fmt::format("GPU {} cannot access GPU {}'s memory (no P2P): the peer path needs NVLink or "
                              "PCIe P2P between every GPU pair; see `engramlab doctor`", g, peer),
                  ErrorContext{.rank = g, .peer = peer, .step = "access"});
  }
  ENGRAM_ASSIGN_OR_RETURN(ShareableHandle handle,
                          memory_[peer]->export_handle(mapped_[peer][peer].allocation(), HandleType::kPosixFd));
  auto imported = MappedAllocation::import(*memory_[g], handle, allocation_bytes_);
  ENGRAM_RETURN_IF_ERROR(memory_[g]->close_fd(handle.fd));
  if (!imported.is_ok()) return std::move(imported).take_status().with_context(g, peer, "import");
  mapped_[g][peer] = std::move(imported).value();
  return Status::ok();
}

Status LocalPeerShards::upload_peer_table(int g) {
  const auto& starts = layout_.starts();
  std::vector<uint64_t> bases;
  for (int s = 0; s < gpus_; ++s) bases.push_back(mapped_[g][s].address());
  ENGRAM_ASSIGN_OR_RETURN(GpuBuffer d_starts, GpuBuffer::allocate(g, starts.size() * sizeof(int64_t), "peer table"));
  ENGRAM_ASSIGN_OR_RETURN(GpuBuffer d_bases, GpuBuffer::allocate(g, bases.size() * sizeof(uint64_t), "peer table"));
  ENGRAM_RETURN_IF_ERROR(
      cuda_runtime_status(cudaMemcpy(d_starts.get(), starts.data(), d_starts.bytes(), cudaMemcpyHostToDevice),
                          "cudaMemcpy shard starts", g, "peer table"));
  ENGRAM_RETURN_IF_ERROR(
      cuda_runtime_status(cudaMemcpy(d_bases.get(), bases.data(), d_bases.bytes(), cudaMemcpyHostToDevice),
                          "cudaMemcpy shard bases", g, "peer table"));
  starts_.push_back(std::move(d_starts));
  bases_.push_back(std::move(d_bases));
  return Status::ok();
}

Status LocalPeerShards::teardown() {
  Status first;
  auto keep = [&](Status s) { if (first.is_ok() && !s.is_ok()) first = std::move(s); };
  for (int g = 0; g < static_cast<int>(memory_.size()); ++g) {
    cudaSetDevice(g);
    cudaDeviceSynchronize();
  }
  starts_.clear();
  bases_.clear();
  for (int pass = 0; pass < 2; ++pass) {  // pass 0: peers' imports; pass 1: own shards
    for (size_t g = 0; g < mapped_.size(); ++g) {
      for (size_t s = 0; s < mapped_[g].size(); ++s)
        if ((pass == 0) != (g == s)) keep(mapped_[g][s].release());
    }
  }
  mapped_.clear();
  return first;
}

}  // namespace engram::gpu_test
