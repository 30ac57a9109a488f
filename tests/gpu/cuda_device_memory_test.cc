// The VMM backend on real GPUs: attributes, the FABRIC probe, errors mapped
// to our codes, POSIX-fd export/import across every visible GPU (N >= 2),
// HBM accounting and a teardown that gives every byte back.
#include <gtest/gtest.h>

#include <filesystem>

#include "backends/cuda/cuda_device_memory.h"
#include "core/base/units.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/gpu/peer_shards.h"

namespace engram::gpu_test {
namespace {

TEST(CudaDeviceMemory, ReportsAttributesAndGranularity) {
  ENGRAM_SKIP_WITHOUT_GPUS(1);
  auto memory = cuda::CudaDeviceMemory::open(0);
  ASSERT_TRUE(memory.is_ok()) << memory.status().to_string();
  auto info = (*memory)->info();
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_FALSE(info->name.empty());
  EXPECT_TRUE(info->vmm_supported);
  EXPECT_TRUE(info->posix_fd_supported);
  EXPECT_GT(info->memory_bytes_total, info->memory_bytes_free);
  EXPECT_GT(info->granularity_bytes, 0u);
  EXPECT_EQ(info->granularity_bytes % 4096, 0u);
  std::printf("GPU 0: %s, %s total, VMM %d, POSIX fd %d, FABRIC attribute %d, granularity %s\n", info->name.c_str(),
              format_gib(info->memory_bytes_total).c_str(), info->vmm_supported, info->posix_fd_supported,
              info->fabric_attribute, format_bytes(info->granularity_bytes).c_str());
}

TEST(CudaDeviceMemory, FabricProbeMatchesTheImexChannel) {
  ENGRAM_SKIP_WITHOUT_GPUS(1);
  auto memory = cuda::CudaDeviceMemory::open(0);
  ASSERT_TRUE(memory.is_ok()) << memory.status().to_string();
  auto info = (*memory)->info();
  ASSERT_TRUE(info.is_ok());
  auto before = (*memory)->memory_info();
  ASSERT_TRUE(before.is_ok());
  Status probe = (*memory)->probe_fabric();
  std::printf("FABRIC probe on GPU 0: %s\n", probe.is_ok() ? "ok" : probe.to_string().c_str());
  std::error_code ec;
  const bool imex_channel = std::filesystem::exists("/dev/nvidia-caps-imex-channels/channel0", ec);
  if (!info->fabric_attribute) {
    EXPECT_EQ(probe.code(), ErrorCode::kFailedPrecondition);
  } else if (!imex_channel) {
    // The attribute lies without an IMEX channel (docs/design.md section 5).
    EXPECT_EQ(probe.code(), ErrorCode::kPermissionDenied) << probe.to_string();
    EXPECT_NE(probe.message().find("CUDA_ERROR_NOT_PERMITTED"), std::string::npos) << probe.message();
    EXPECT_EQ(probe.context().step, device_step_name(DeviceStep::kProbeFabric));
  }
  auto after = (*memory)->memory_info();
  ASSERT_TRUE(after.is_ok());
  EXPECT_EQ(before->first, after->first) << "the probe must free what it created";
}

TEST(CudaDeviceMemory, ErrorsCarryCodeStepAndCudaName) {
  ENGRAM_SKIP_WITHOUT_GPUS(1);
  auto memory = cuda::CudaDeviceMemory::open(0);
  ASSERT_TRUE(memory.is_ok());
  auto gran = (*memory)->granularity(HandleType::kPosixFd);
  ASSERT_TRUE(gran.is_ok());
  auto odd = (*memory)->create(*gran + 1, HandleType::kPosixFd);
  ASSERT_FALSE(odd.is_ok());
  EXPECT_EQ(odd.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(odd.status().context().step, "create");

  ShareableHandle bogus;
  bogus.type = HandleType::kPosixFd;
  bogus.fd = 987;  // not an fd of this process
  auto imported = (*memory)->import_handle(bogus);
  ASSERT_FALSE(imported.is_ok());
  EXPECT_EQ(imported.status().context().step, "import");
  EXPECT_NE(imported.status().message().find("CUDA_ERROR_"), std::string::npos) << imported.status().message();

  auto missing = cuda::CudaDeviceMemory::open(1000);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kFailedPrecondition);

  auto info = (*memory)->info();
  ASSERT_TRUE(info.is_ok());
  auto huge = (*memory)->create(round_up(info->memory_bytes_total * 2, *gran), HandleType::kPosixFd);
  ASSERT_FALSE(huge.is_ok());
  EXPECT_EQ(huge.status().code(), ErrorCode::kResourceExhausted) << huge.status().to_string();
}

// Over every visible GPU (N >= 2): each GPU's HBM pays for its own shard
// (1/N of the table) only, every GPU reads every peer's shard bytes through
// its mapping, and teardown gives every byte back.
TEST(CudaDeviceMemory, ShardsCostTheirShareOfTheTableAndTeardownGivesItBack) {
  ENGRAM_SKIP_WITHOUT_GPUS(2);
  const int n = cuda::gpu_presence().count;
  const int dim = 256;
  const int64_t rows = 200'003;  // odd: uneven shards
  const uint64_t row_bytes = row_bytes_of(RowFormat::kFp8E4M3Ue8m0, dim);
  auto table = make_table(RowFormat::kFp8E4M3Ue8m0, dim, rows, 11);
  std::printf("CudaDeviceMemory: shards over N=%d GPUs\n", n);
  // Runtime contexts first, so their own memory is outside the deltas.
  for (int g = 0; g < n; ++g) {
    ENGRAM_CUDA_OK(cudaSetDevice(g));
    ENGRAM_CUDA_OK(cudaFree(nullptr));
    DeviceBuffer warm(g, 64);  // the driver's small-allocation pool, kept after free
  }
  std::vector<uint64_t> free_before(static_cast<size_t>(n));
  {
    std::vector<std::unique_ptr<cuda::CudaDeviceMemory>> probes;
    for (int g = 0; g < n; ++g) {
      auto m = cuda::CudaDeviceMemory::open(g);
      ASSERT_TRUE(m.is_ok());
      auto info = (*m)->memory_info();
      ASSERT_TRUE(info.is_ok());
      free_before[g] = info->first;
    }
  }
  {
    PeerShards shards(n, rows, row_bytes);
    ENGRAM_STATUS_OK(shards.build(table));
    const uint64_t gran = shards.granularity_bytes();
    const uint64_t table_bytes = static_cast<uint64_t>(rows) * row_bytes;
    const uint64_t share = (table_bytes + static_cast<uint64_t>(n) - 1) / static_cast<uint64_t>(n);
    EXPECT_EQ(shards.allocation_bytes(), round_up(static_cast<uint64_t>(shards.layout().max_shard_rows()) * row_bytes, gran));
    EXPECT_GE(shards.allocation_bytes(), share);
    EXPECT_LT(shards.allocation_bytes(), share + gran + row_bytes);
    for (int g = 0; g < n; ++g) {
      auto info = shards.memory(g).memory_info();
      ASSERT_TRUE(info.is_ok());
      const uint64_t used = free_before[g] - info->first;
      std::printf("GPU %d of %d: shard allocation %s, cuMemGetInfo delta %s (own shard + %d peer mapping(s))\n", g,
                  n, format_bytes(shards.allocation_bytes()).c_str(), format_bytes(used).c_str(), n - 1);
      // The imported peer shards cost no HBM here: only the own shard, plus
      // at most a granule of driver bookkeeping.
      EXPECT_GE(used, shards.allocation_bytes());
      EXPECT_LE(used, shards.allocation_bytes() + gran);
    }
    // The mapped bytes are the table's: read back every shard through every
    // other GPU's mapping.
    for (int g = 0; g < n; ++g) {
      // Peer mapping address on GPU g = device_bases(g)[peer]; copy them down.
      std::vector<const void*> bases(static_cast<size_t>(n));
      ENGRAM_CUDA_OK(cudaMemcpy(bases.data(), shards.device_bases(g), n * sizeof(void*), cudaMemcpyDeviceToHost));
      for (int peer = 0; peer < n; ++peer) {
        if (peer == g) continue;
        const uint64_t bytes = static_cast<uint64_t>(shards.layout().shard_rows(peer)) * row_bytes;
        std::vector<std::byte> back(bytes);
        ENGRAM_STATUS_OK(shards.memory(g).copy_from_device(back, reinterpret_cast<DevicePtr>(bases[peer])));
        const auto* expect = reinterpret_cast<const std::byte*>(table.data()) +
                             static_cast<uint64_t>(shards.layout().shard_begin(peer)) * row_bytes;
        EXPECT_EQ(0, std::memcmp(back.data(), expect, bytes)) << "GPU " << g << " reading shard " << peer;
      }
    }
    ENGRAM_STATUS_OK(shards.teardown());
  }
  for (int g = 0; g < n; ++g) {
    auto m = cuda::CudaDeviceMemory::open(g);
    ASSERT_TRUE(m.is_ok());
    auto info = (*m)->memory_info();
    ASSERT_TRUE(info.is_ok());
    EXPECT_EQ(info->first, free_before[g]) << "GPU " << g << " did not get its memory back";
  }
}

}  // namespace
}  // namespace engram::gpu_test
