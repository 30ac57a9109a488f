// The lookup kernels on real GPUs against the CPU rule, bit for bit (NaN as
// one value): every (FP8, scale) pair; every kernel variant; the peer path
// over every visible GPU's VMM shard (N >= 2), eager and as a replayed CUDA
// graph; and the collective path (all-gather ids, gather_owned, NCCL
// reduce-scatter over DP=N) equal to the peer path. ENGRAMLAB_GPU_TEST_SHARD_GIB
// makes the multi-GPU table that many GiB per GPU, filled on device.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "backends/cuda/nccl_collectives.h"
#include "core/base/units.h"
#include "core/model/row_format.h"
#include "operator_checks/bench_kernels.h"
#include "kernels/gather_kernels.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/gpu/peer_shards.h"

namespace engram::gpu_test {
namespace {

using kernels::GatherOwnedArgs;
using kernels::GatherPeerArgs;
using kernels::RowLayout;

RowLayout layout_of(RowFormat format, int dim) {
  RowLayout layout;
  layout.format = format;
  layout.dim = dim;
  layout.row_bytes = row_bytes_of(format, dim);
  return layout;
}

template <typename T>
DeviceBuffer upload(int device, const std::vector<T>& host) {
  DeviceBuffer buffer(device, host.size() * sizeof(T));
  cudaSetDevice(device);
  cudaMemcpy(buffer.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return buffer;
}

std::vector<uint16_t> download(const DeviceBuffer& buffer) {
  std::vector<uint16_t> host(buffer.bytes() / 2);
  cudaMemcpy(host.data(), buffer.get(), buffer.bytes(), cudaMemcpyDeviceToHost);
  return host;
}

// Every FP8 byte under every scale byte: row s holds values 0..255 and every
// block's scale is s; both the peer source (one shard) and the owned source.
TEST(GatherKernels, EveryFp8ValueUnderEveryScaleMatchesTheCpuRule) {
  ENGRAM_SKIP_WITHOUT_GPUS(1);
  const int dim = 256;
  const RowLayout layout = layout_of(RowFormat::kFp8E4M3Ue8m0, dim);
  std::vector<uint8_t> table(256 * layout.row_bytes);
  for (int s = 0; s < 256; ++s) {
    uint8_t* row = &table[static_cast<size_t>(s) * layout.row_bytes];
    for (int i = 0; i < dim; ++i) row[i] = static_cast<uint8_t>(i);
    for (int b = 0; b < dim / kScaleBlock; ++b) row[dim + b] = static_cast<uint8_t>(s);
  }
  std::vector<int64_t> ids;
  for (int s = 0; s < 256; ++s) ids.push_back(s);
  ids.push_back(kDeadId);
  ids.push_back(256);
  const int heads = 2;  // 258 ids = 129 tokens x 2 heads
  const int64_t tokens = static_cast<int64_t>(ids.size()) / heads;
  const auto expected = reference_lookup(layout.format, dim, table, 256, ids);

  ENGRAM_CUDA_OK(cudaSetDevice(0));
  DeviceBuffer d_table = upload(0, table);
  DeviceBuffer d_ids = upload(0, ids);
  std::vector<int64_t> starts{0, 256};
  DeviceBuffer d_starts = upload(0, starts);
  std::vector<const void*> bases{d_table.get()};
  DeviceBuffer d_bases = upload(0, bases);
  DeviceBuffer d_out(0, ids.size() * dim * 2);

  ENGRAM_CUDA_OK(cudaMemset(d_out.get(), 0xab, d_out.bytes()));  // poison: every value must be written
  GatherPeerArgs peer;
  peer.ids = d_ids.as<int64_t>();
  peer.tokens = tokens;
  peer.heads = heads;
  peer.shard_starts = d_starts.as<int64_t>();
  peer.shard_bases = d_bases.as<const void* const>();
  peer.shard_count = 1;
  peer.layout = layout;
  peer.out = d_out.as<uint16_t>();
  ENGRAM_STATUS_OK(kernels::gather_peer(peer, nullptr));
  ENGRAM_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(same_bf16(expected, download(d_out), dim));

  ENGRAM_STATUS_OK(kernels::zero_fill(d_out.as<uint16_t>(), d_out.bytes() / 2, nullptr));
  GatherOwnedArgs owned;
  owned.ids = d_ids.as<int64_t>();
  owned.tokens = tokens;
  owned.heads = heads;
  owned.shard_begin = 0;
  owned.shard_end = 256;
  owned.shard_base = d_table.get();
  owned.layout = layout;
  owned.out = d_out.as<uint16_t>();
  ENGRAM_STATUS_OK(kernels::gather_owned(owned, nullptr));
  ENGRAM_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(same_bf16(expected, download(d_out), dim));
}

// Scale bytes 0 and 255 by the table's rule (vLLM: +0 and +inf; SGLang's
// CUDA kernel: 2^-127 and +inf; its torch fallback: 2^-127 and NaN), and -0
// written +0 or kept (MinusZeroRule: vLLM and SGLang keep it) on every kernel path: peer, owned, range (a registered
// host table) and staged host rows, the V4.1 fast path (dim 256) and the
// warp-per-row kernel (dim 64); every FP8 byte under every scale byte,
// against core's CPU rule (tests/scale_byte_rule_test.cc checks that one
// against the formats' definitions).
TEST(GatherKernels, EachScaleByteRuleOnEveryPathMatchesTheCpuRule) {
  ENGRAM_SKIP_WITHOUT_GPUS(1);
  for (ScaleByteRule rule : {ScaleByteRule::kVllm, ScaleByteRule::kSglang, ScaleByteRule::kSglangTorch})
  for (MinusZeroRule zero : {MinusZeroRule::kWritePlusZero, MinusZeroRule::kKeep}) {
    for (int dim : {256, 64}) {
      SCOPED_TRACE(fmt::format("rule {}, -0 {}, dim {}", scale_byte_rule_name(rule), minus_zero_rule_name(zero), dim));
      RowLayout layout = layout_of(RowFormat::kFp8E4M3Ue8m0, dim);
      layout.scale_byte_rule = rule;
      layout.minus_zero = zero;
      // Row s: values i % 256 under scale s in every block.
      std::vector<uint8_t> table(256 * layout.row_bytes);
      for (int s = 0; s < 256; ++s) {
        uint8_t* row = &table[static_cast<size_t>(s) * layout.row_bytes];
        for (int i = 0; i < dim; ++i) row[i] = static_cast<uint8_t>((i * 4 + s) % 256);
        for (int b = 0; b < dim / kScaleBlock; ++b) row[dim + b] = static_cast<uint8_t>(s);
      }
      std::vector<int64_t> ids;
      for (int s = 0; s < 256; ++s) ids.push_back(s);
      ids.push_back(kDeadId);
      ids.push_back(256);
      const int heads = 2;
      const int64_t tokens = static_cast<int64_t>(ids.size()) / heads;
      std::vector<uint16_t> expected(ids.size() * static_cast<size_t>(dim), 0);
      for (size_t k = 0; k < ids.size(); ++k) {
        if (ids[k] < 0 || ids[k] >= 256) continue;
        dequantize_row(RowFormat::kFp8E4M3Ue8m0, dim, rule,
                       std::span(reinterpret_cast<const std::byte*>(&table[static_cast<size_t>(ids[k]) * layout.row_bytes]),
                                 layout.row_bytes),
                       std::span(&expected[k * static_cast<size_t>(dim)], static_cast<size_t>(dim)), zero);
      }
      // Staged rows: slot k's row at k x row_bytes (a zero row where the id reads none).
      std::vector<uint8_t> staged(ids.size() * layout.row_bytes, 0);
      for (size_t k = 0; k < ids.size(); ++k)
        if (ids[k] >= 0 && ids[k] < 256)
          std::memcpy(&staged[k * layout.row_bytes], &table[static_cast<size_t>(ids[k]) * layout.row_bytes], layout.row_bytes);

      ENGRAM_CUDA_OK(cudaSetDevice(0));
      DeviceBuffer d_table = upload(0, table);
      DeviceBuffer d_staged = upload(0, staged);
      DeviceBuffer d_ids = upload(0, ids);
      DeviceBuffer d_starts = upload(0, std::vector<int64_t>{0, 256});
      DeviceBuffer d_bases = upload(0, std::vector<const void*>{d_table.get()});
      DeviceBuffer d_out(0, ids.size() * static_cast<size_t>(dim) * 2);
      auto poisoned = [&] { ENGRAM_CUDA_OK(cudaMemset(d_out.get(), 0xab, d_out.bytes())); };

      poisoned();
      GatherPeerArgs peer;
      peer.ids = d_ids.as<int64_t>();
      peer.tokens = tokens;
      peer.heads = heads;
      peer.shard_starts = d_starts.as<int64_t>();
      peer.shard_bases = d_bases.as<const void* const>();
      peer.shard_count = 1;
      peer.layout = layout;
      peer.out = d_out.as<uint16_t>();
      ENGRAM_STATUS_OK(kernels::gather_peer(peer, nullptr));
      ENGRAM_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_TRUE(same_bf16(expected, download(d_out), dim)) << "gather_peer";

      ENGRAM_STATUS_OK(kernels::zero_fill(d_out.as<uint16_t>(), d_out.bytes() / 2, nullptr));
      GatherOwnedArgs owned;
      owned.ids = d_ids.as<int64_t>();
      owned.tokens = tokens;
      owned.heads = heads;
      owned.shard_begin = 0;
      owned.shard_end = 256;
      owned.shard_base = d_table.get();
      owned.layout = layout;
      owned.out = d_out.as<uint16_t>();
      ENGRAM_STATUS_OK(kernels::gather_owned(owned, nullptr));
      ENGRAM_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_TRUE(same_bf16(expected, download(d_out), dim)) << "gather_owned";

      kernels::HostRowsArgs range;
      range.ids = d_ids.as<int64_t>();
      range.tokens = tokens;
      range.ids_per_token = heads;
      range.head_begin = 0;
      range.head_count = heads;
      range.first_row = 0;
      range.row_count = 256;
      range.layout = layout;
      range.out = d_out.as<uint16_t>();
      poisoned();
      ENGRAM_STATUS_OK(kernels::gather_range(range, d_table.get(), nullptr));
      ENGRAM_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_TRUE(same_bf16(expected, download(d_out), dim)) << "gather_range";

      poisoned();
      ENGRAM_STATUS_OK(kernels::dequant_staged(range, d_staged.get(), nullptr));
      ENGRAM_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_TRUE(same_bf16(expected, download(d_out), dim)) << "dequant_staged";
    }
  }
}

// The 8-byte vector paths and the byte-wise paths (row strides that break
// 8-byte alignment), for both formats, with rows split over three shards
// (one of them empty) so the binary search sees uneven starts.
TEST(GatherKernels, EveryVariantMatchesTheCpuRule) {
  ENGRAM_SKIP_WITHOUT_GPUS(1);
  struct Case { RowFormat format; int dim; };
  const Case cases[] = {{RowFormat::kFp8E4M3Ue8m0, 256}, {RowFormat::kFp8E4M3Ue8m0, 64},
                        {RowFormat::kBf16, 64}, {RowFormat::kBf16, 30}, {RowFormat::kFp8E4M3Ue8m0, 512}};
  Rng rng(7);
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("format {} dim {}", static_cast<int>(c.format), c.dim));
    const RowLayout layout = layout_of(c.format, c.dim);
    const int64_t rows = 1001;
    const auto table = make_table(c.format, c.dim, rows, 100 + static_cast<uint64_t>(c.dim));
    const std::vector<int64_t> starts{0, 400, 400, rows};  // shard 1 is empty
    std::vector<DeviceBuffer> shards;
    std::vector<const void*> bases;
    for (size_t s = 0; s + 1 < starts.size(); ++s) {
      std::vector<uint8_t> part(table.begin() + starts[s] * static_cast<int64_t>(layout.row_bytes),
                                table.begin() + starts[s + 1] * static_cast<int64_t>(layout.row_bytes));
      part.resize(std::max<size_t>(part.size(), 1));
      shards.push_back(upload(0, part));
      bases.push_back(shards.back().get());
    }
    const int heads = 3;
    const int64_t tokens = 333;
    auto ids = make_ids(static_cast<size_t>(tokens * heads), rows, starts, rng);
    DeviceBuffer d_ids = upload(0, ids);
    DeviceBuffer d_starts = upload(0, starts);
    DeviceBuffer d_bases = upload(0, bases);
    DeviceBuffer d_out(0, ids.size() * static_cast<size_t>(c.dim) * 2);
    ENGRAM_CUDA_OK(cudaMemset(d_out.get(), 0xab, d_out.bytes()));
    GatherPeerArgs args;
    args.ids = d_ids.as<int64_t>();
    args.tokens = tokens;
    args.heads = heads;
    args.shard_starts = d_starts.as<int64_t>();
    args.shard_bases = d_bases.as<const void* const>();
    args.shard_count = 3;
    args.layout = layout;
    args.out = d_out.as<uint16_t>();
    ENGRAM_STATUS_OK(kernels::gather_peer(args, nullptr));
    ENGRAM_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_TRUE(same_bf16(reference_lookup(c.format, c.dim, table, rows, ids), download(d_out), c.dim));
  }
}

TEST(GatherKernels, RejectsBadArguments) {
  ENGRAM_SKIP_WITHOUT_GPUS(1);
  GatherPeerArgs args;
  args.tokens = 1;
  args.heads = 1;
  args.layout = layout_of(RowFormat::kFp8E4M3Ue8m0, 48);  // not a multiple of 32
  EXPECT_EQ(kernels::gather_peer(args, nullptr).code(), ErrorCode::kInvalidArgument);
  args.layout = layout_of(RowFormat::kFp8E4M3Ue8m0, 64);
  EXPECT_EQ(kernels::gather_peer(args, nullptr).code(), ErrorCode::kInvalidArgument);  // null pointers
  args.tokens = 0;
  EXPECT_TRUE(kernels::gather_peer(args, nullptr).is_ok());  // nothing to do, nothing launched
}

// ENGRAMLAB_GPU_TEST_SHARD_GIB: GiB of table shard per GPU for MultiGpuLookup
// (filled on device, checked against operator_checks::fill_word + the CPU rule);
// unset or empty: the small host-filled table. Anything else is an error, so
// a mistyped value cannot quietly run the small table.
Result<double> shard_gib_from_env() {
  const char* text = std::getenv("ENGRAMLAB_GPU_TEST_SHARD_GIB");
  if (text == nullptr || *text == '\0') return 0.0;
  char* end = nullptr;
  const double gib = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(gib > 0) || gib > 1024) {
    return invalid_argument(fmt::format("ENGRAMLAB_GPU_TEST_SHARD_GIB='{}': want GiB of shard per GPU, a number in "
                                        "(0, 1024], e.g. 8; unset it for the small table", text));
  }
  return gib;
}

// Every visible GPU (N >= 2), one shard each in POSIX-fd VMM memory mapped by
// all N; the collective path runs over DP=N.
class MultiGpuLookup : public ::testing::Test {
 protected:
  static constexpr int kDim = 256;
  static constexpr int kHeads = 24;
  static constexpr int64_t kSmallRows = 50'021;
  static constexpr uint64_t kTableSeed = 2024;

  void SetUp() override {
    const auto presence = cuda::gpu_presence();
    if (presence.count < 2) {
      GTEST_SKIP() << (presence.count == 0 ? "no GPU: " + presence.reason
                                           : fmt::format("needs 2 or more GPUs; this machine has {}", presence.count));
    }
    gpus_ = presence.count;
    auto gib = shard_gib_from_env();
    ASSERT_TRUE(gib.is_ok()) << gib.status().to_string();
    layout_ = layout_of(RowFormat::kFp8E4M3Ue8m0, kDim);
    filled_on_device_ = *gib > 0;
    if (filled_on_device_) {
      // One row more than N equal shards: the first shard is one row longer.
      const auto rows_per_gpu = static_cast<int64_t>(*gib * static_cast<double>(1ull << 30) /
                                                     static_cast<double>(layout_.row_bytes));
      ASSERT_GT(rows_per_gpu, 0);
      rows_ = rows_per_gpu * gpus_ + 1;
    } else {
      rows_ = kSmallRows;
      table_ = make_table(layout_.format, kDim, rows_, kTableSeed);
    }
    shards_ = std::make_unique<PeerShards>(gpus_, rows_, layout_.row_bytes);
    Status built = filled_on_device_ ? shards_->build_filled_on_device(kTableSeed, kDim) : shards_->build(table_);
    ASSERT_TRUE(built.is_ok()) << built.to_string();
    std::printf("MultiGpuLookup: N=%d GPUs (DP=%d), %lld rows x %llu B, shard %s per GPU, %s\n", gpus_, gpus_,
                static_cast<long long>(rows_), static_cast<unsigned long long>(layout_.row_bytes),
                format_gib(shards_->allocation_bytes()).c_str(),
                filled_on_device_ ? "filled on device (ENGRAMLAB_GPU_TEST_SHARD_GIB), rows checked via fill_word"
                                  : "filled from a host copy");
    RecordProperty("gpus", gpus_);
    RecordProperty("shard_bytes", std::to_string(shards_->allocation_bytes()));
    streams_.assign(static_cast<size_t>(gpus_), nullptr);
    for (int g = 0; g < gpus_; ++g) {
      ASSERT_EQ(cudaSetDevice(g), cudaSuccess);
      ASSERT_EQ(cudaStreamCreateWithFlags(&streams_[g], cudaStreamNonBlocking), cudaSuccess);
    }
  }
  void TearDown() override {
    for (int g = 0; g < static_cast<int>(streams_.size()); ++g) {
      if (streams_[g] != nullptr) {
        cudaSetDevice(g);
        cudaStreamSynchronize(streams_[g]);
        cudaStreamDestroy(streams_[g]);
      }
    }
    if (shards_) {
      EXPECT_TRUE(shards_->teardown().is_ok());
    }
  }

  GatherPeerArgs peer_args(int g, const DeviceBuffer& ids, int64_t tokens, const DeviceBuffer& out) const {
    GatherPeerArgs args;
    args.ids = ids.as<int64_t>();
    args.tokens = tokens;
    args.heads = kHeads;
    args.shard_starts = shards_->device_starts(g);
    args.shard_bases = shards_->device_bases(g);
    args.shard_count = gpus_;
    args.layout = layout_;
    args.out = out.as<uint16_t>();
    return args;
  }

  std::vector<int64_t> ids_for(int64_t tokens, Rng& rng) {
    return make_ids(static_cast<size_t>(tokens * kHeads), rows_, shards_->layout().starts(), rng);
  }

  // The CPU rule for every slot: from the host table, or (big tables) from
  // each looked-up row rebuilt word by word with the fill kernel's host twin.
  std::vector<uint16_t> expected(std::span<const int64_t> ids) const {
    if (!filled_on_device_) return reference_lookup(layout_.format, kDim, table_, rows_, ids);
    std::vector<uint16_t> out(ids.size() * static_cast<size_t>(kDim), 0);
    std::vector<uint8_t> row(layout_.row_bytes);
    for (size_t s = 0; s < ids.size(); ++s) {
      if (ids[s] < 0 || ids[s] >= rows_) continue;
      for (uint64_t w = 0; w < layout_.row_bytes / 8; ++w) {
        const uint64_t word = operator_checks::fill_word(kTableSeed, ids[s], w, layout_.row_bytes, kDim);
        std::memcpy(row.data() + 8 * w, &word, 8);
      }
      reference_row(layout_.format, kDim, row.data(), &out[s * static_cast<size_t>(kDim)]);
    }
    return out;
  }

  int gpus_ = 0;
  int64_t rows_ = 0;
  bool filled_on_device_ = false;
  RowLayout layout_;
  std::vector<uint8_t> table_;  // empty when filled on device
  std::unique_ptr<PeerShards> shards_;
  std::vector<cudaStream_t> streams_;
};

TEST_F(MultiGpuLookup, PeerPathEagerMatchesTheCpuRule) {
  Rng rng(1);
  for (int64_t tokens : {1, 37, 1024}) {
    for (int g = 0; g < gpus_; ++g) {
      SCOPED_TRACE(fmt::format("GPU {} of N={} tokens {}", g, gpus_, tokens));
      auto ids = ids_for(tokens, rng);
      DeviceBuffer d_ids = upload(g, ids);
      DeviceBuffer d_out(g, ids.size() * kDim * 2);
      ENGRAM_CUDA_OK(cudaMemset(d_out.get(), 0xab, d_out.bytes()));
      ENGRAM_STATUS_OK(kernels::gather_peer(peer_args(g, d_ids, tokens, d_out), streams_[g]));
      ENGRAM_CUDA_OK(cudaStreamSynchronize(streams_[g]));
      EXPECT_TRUE(same_bf16(expected(ids), download(d_out), kDim));
    }
  }
  std::printf("MultiGpuLookup: peer path eager == CPU rule on each of N=%d GPUs\n", gpus_);
}

TEST_F(MultiGpuLookup, PeerPathReplaysAsACudaGraph) {
  Rng rng(2);
  const int64_t tokens = 64;
  for (int g = 0; g < gpus_; ++g) {
    SCOPED_TRACE(fmt::format("GPU {} of N={}", g, gpus_));
    ENGRAM_CUDA_OK(cudaSetDevice(g));
    DeviceBuffer d_ids(g, static_cast<size_t>(tokens * kHeads) * sizeof(int64_t));
    DeviceBuffer d_out(g, static_cast<size_t>(tokens * kHeads) * kDim * 2);
    cudaGraph_t graph = nullptr;
    ENGRAM_CUDA_OK(cudaStreamBeginCapture(streams_[g], cudaStreamCaptureModeThreadLocal));
    Status launched = kernels::gather_peer(peer_args(g, d_ids, tokens, d_out), streams_[g]);
    ENGRAM_CUDA_OK(cudaStreamEndCapture(streams_[g], &graph));
    ENGRAM_STATUS_OK(std::move(launched));
    cudaGraphExec_t exec = nullptr;
    ENGRAM_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 3; ++replay) {
      auto ids = ids_for(tokens, rng);  // new ids in the same buffer each step
      ENGRAM_CUDA_OK(cudaMemcpy(d_ids.get(), ids.data(), d_ids.bytes(), cudaMemcpyHostToDevice));
      ENGRAM_CUDA_OK(cudaMemset(d_out.get(), 0xab, d_out.bytes()));
      ENGRAM_CUDA_OK(cudaGraphLaunch(exec, streams_[g]));
      ENGRAM_CUDA_OK(cudaStreamSynchronize(streams_[g]));
      EXPECT_TRUE(same_bf16(expected(ids), download(d_out), kDim)) << "replay " << replay;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  std::printf("MultiGpuLookup: peer path graph replays == CPU rule on each of N=%d GPUs\n", gpus_);
}

// Collective path over DP=N: communicators bootstrapped through a core
// Collectives (N threads), then driven from this thread in NCCL groups.
TEST_F(MultiGpuLookup, CollectivePathEqualsThePeerPath) {
  const int n = gpus_;
  ThreadCollectivesHub hub(n);
  std::vector<std::unique_ptr<cuda::NcclCommunicator>> comms(static_cast<size_t>(n));
  std::vector<Status> made(static_cast<size_t>(n));
  {
    std::vector<std::thread> threads;
    for (int g = 0; g < n; ++g) {
      threads.emplace_back([&, g] {
        ThreadCollectives bootstrap(hub, g);
        auto comm = cuda::NcclCommunicator::create(bootstrap, g);
        if (comm.is_ok()) comms[g] = std::move(*comm); else made[g] = comm.status();
      });
    }
    for (auto& t : threads) t.join();
  }
  for (int g = 0; g < n; ++g) {
    if (made[g].message().find("built without NCCL") != std::string::npos) GTEST_SKIP() << made[g].message();
    ASSERT_TRUE(made[g].is_ok()) << made[g].to_string();
  }

  Rng rng(3);
  for (int64_t tokens : {1, 100, 512}) {
    SCOPED_TRACE(fmt::format("N={} GPUs, tokens per rank {}", n, tokens));
    const size_t slots = static_cast<size_t>(tokens * kHeads);
    const size_t group_slots = static_cast<size_t>(n) * slots;
    std::vector<std::vector<int64_t>> ids(static_cast<size_t>(n));
    std::vector<DeviceBuffer> d_ids, d_all_ids, d_owned, d_result, d_peer_out;
    for (int g = 0; g < n; ++g) {
      ids[g] = ids_for(tokens, rng);
      d_ids.push_back(upload(g, ids[g]));
      d_all_ids.emplace_back(g, group_slots * sizeof(int64_t));
      d_owned.emplace_back(g, group_slots * kDim * 2);
      d_result.emplace_back(g, slots * kDim * 2);
      d_peer_out.emplace_back(g, slots * kDim * 2);
      ENGRAM_CUDA_OK(cudaMemset(d_result[g].get(), 0xab, d_result[g].bytes()));
    }
    {
      cuda::NcclGroup group;
      for (int g = 0; g < n; ++g) {
        ENGRAM_STATUS_OK(comms[g]->all_gather_ids(d_ids[g].as<int64_t>(), d_all_ids[g].as<int64_t>(), slots, streams_[g]));
      }
      ENGRAM_STATUS_OK(group.end());
    }
    for (int g = 0; g < n; ++g) {
      ENGRAM_CUDA_OK(cudaSetDevice(g));
      ENGRAM_STATUS_OK(kernels::zero_fill(d_owned[g].as<uint16_t>(), group_slots * kDim, streams_[g]));
      GatherOwnedArgs owned;
      owned.ids = d_all_ids[g].as<int64_t>();
      owned.tokens = n * tokens;
      owned.heads = kHeads;
      owned.shard_begin = shards_->layout().shard_begin(g);
      owned.shard_end = shards_->layout().shard_end(g);
      owned.shard_base = shards_->own_shard(g);
      owned.layout = layout_;
      owned.out = d_owned[g].as<uint16_t>();
      ENGRAM_STATUS_OK(kernels::gather_owned(owned, streams_[g]));
    }
    {
      cuda::NcclGroup group;
      for (int g = 0; g < n; ++g) {
        ENGRAM_STATUS_OK(comms[g]->reduce_scatter_sum_bf16(d_owned[g].as<uint16_t>(), d_result[g].as<uint16_t>(),
                                                           slots * kDim, streams_[g]));
      }
      ENGRAM_STATUS_OK(group.end());
    }
    for (int g = 0; g < n; ++g) {
      ENGRAM_CUDA_OK(cudaSetDevice(g));
      ENGRAM_STATUS_OK(kernels::gather_peer(peer_args(g, d_ids[g], tokens, d_peer_out[g]), streams_[g]));
      ENGRAM_CUDA_OK(cudaStreamSynchronize(streams_[g]));
      const auto collective = download(d_result[g]);
      EXPECT_TRUE(same_bf16(download(d_peer_out[g]), collective, kDim)) << "GPU " << g << ": collective vs peer";
      EXPECT_TRUE(same_bf16(expected(ids[g]), collective, kDim)) << "GPU " << g << ": collective vs CPU";
    }
  }
  comms.clear();
  std::printf("MultiGpuLookup: collective path (all-gather ids, gather, reduce-scatter over DP=%d) == peer path == "
              "CPU rule\n", n);
}

}  // namespace
}  // namespace engram::gpu_test
