// gather_fp8_256, the V4.1-row path of gather_peer / gather_owned: every
// size step of the dispatch (chosen by the slot count against the GPU's
// size), every compiled peer variant (kernels/gather_peer_variants.h), and ragged tails
// (slot counts that are not a multiple of a block's rows), against the CPU
// rule, over three shards with an empty one; rows at odd indices start 8
// bytes past a 16-byte boundary, so both halves of the 16-byte load path run.
#include <gtest/gtest.h>

#include <algorithm>

#include "kernels/gather_kernels.h"
#include "kernels/gather_peer_variants.h"
#include "tests/gpu/gpu_test_support.h"

namespace engram::gpu_test {
namespace {

template <typename T>
DeviceBuffer upload(const std::vector<T>& host) {
  DeviceBuffer buffer(0, host.size() * sizeof(T));
  cudaMemcpy(buffer.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return buffer;
}

std::vector<uint16_t> download(const DeviceBuffer& buffer) {
  std::vector<uint16_t> host(buffer.bytes() / 2);
  cudaMemcpy(host.data(), buffer.get(), buffer.bytes(), cudaMemcpyDeviceToHost);
  return host;
}

TEST(GatherFastPath, EveryRowsPerWarpVariantAndRaggedTailsMatchTheCpuRule) {
  ENGRAM_SKIP_WITHOUT_GPUS(1);
  ENGRAM_CUDA_OK(cudaSetDevice(0));
  int sms = 0;
  ENGRAM_CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t wave = static_cast<int64_t>(sms) * 64;  // warps in one wave: the 1 -> 2 -> 4 rows-per-warp steps
  const int dim = 256;
  kernels::RowLayout layout;
  layout.format = RowFormat::kFp8E4M3Ue8m0;
  layout.dim = dim;
  layout.row_bytes = row_bytes_of(layout.format, dim);
  const int64_t rows = 3001;
  const auto table = make_table(layout.format, dim, rows, 77);
  const std::vector<int64_t> starts{0, 1200, 1200, rows};
  std::vector<DeviceBuffer> shards;
  std::vector<const void*> bases;
  for (size_t s = 0; s + 1 < starts.size(); ++s) {
    std::vector<uint8_t> part(table.begin() + starts[s] * static_cast<int64_t>(layout.row_bytes),
                              table.begin() + starts[s + 1] * static_cast<int64_t>(layout.row_bytes));
    part.resize(std::max<size_t>(part.size(), 1));
    shards.push_back(upload(part));
    bases.push_back(shards.back().get());
  }
  DeviceBuffer d_starts = upload(starts);
  DeviceBuffer d_bases = upload(bases);
  Rng rng(11);
  // heads = 1 so any slot count can be asked for.
  for (int64_t slots : {int64_t{1}, int64_t{31}, int64_t{257}, wave, wave + 1, wave + 13, 2 * wave, 2 * wave + 5,
                        3 * wave + 27}) {
    SCOPED_TRACE(fmt::format("slots {}", slots));
    auto ids = make_ids(static_cast<size_t>(slots), rows, starts, rng);
    DeviceBuffer d_ids = upload(ids);
    DeviceBuffer d_out(0, static_cast<size_t>(slots) * dim * 2 + 512);  // + one row past the end, must stay poisoned
    ENGRAM_CUDA_OK(cudaMemset(d_out.get(), 0xab, d_out.bytes()));
    kernels::GatherPeerArgs args;
    args.ids = d_ids.as<int64_t>();
    args.tokens = slots;
    args.heads = 1;
    args.shard_starts = d_starts.as<int64_t>();
    args.shard_bases = d_bases.as<const void* const>();
    args.shard_count = 3;
    args.layout = layout;
    args.out = d_out.as<uint16_t>();
    const auto expected = reference_lookup(layout.format, dim, table, rows, ids);
    std::vector<uint16_t> out;
    ENGRAM_STATUS_OK(kernels::gather_peer(args, nullptr));
    ENGRAM_CUDA_OK(cudaDeviceSynchronize());
    out = download(d_out);
    EXPECT_TRUE(same_bf16(expected, std::span(out).first(expected.size()), dim));
    for (size_t i = expected.size(); i < out.size(); ++i) ASSERT_EQ(out[i], 0xabab) << "written past the end at " << i;

    // gather_owned over shard 2 only: its rows land, every other slot keeps
    // the poison (the collective path relies on untouched zeros).
    ENGRAM_CUDA_OK(cudaMemset(d_out.get(), 0xab, d_out.bytes()));
    kernels::GatherOwnedArgs owned;
    owned.ids = d_ids.as<int64_t>();
    owned.tokens = slots;
    owned.heads = 1;
    owned.shard_begin = starts[2];
    owned.shard_end = starts[3];
    owned.shard_base = bases[2];
    owned.layout = layout;
    owned.out = d_out.as<uint16_t>();
    ENGRAM_STATUS_OK(kernels::gather_owned(owned, nullptr));
    ENGRAM_CUDA_OK(cudaDeviceSynchronize());
    out = download(d_out);
    size_t bad = 0;
    for (size_t s = 0; s < ids.size(); ++s) {
      const bool mine = ids[s] >= starts[2] && ids[s] < starts[3];
      for (int v = 0; v < dim; ++v) {
        const uint16_t got = out[s * dim + static_cast<size_t>(v)];
        const bool ok = mine ? bf16_same(expected[s * dim + static_cast<size_t>(v)], got) : got == 0xabab;
        if (!ok && ++bad <= 3) ADD_FAILURE() << "owned slot " << s << " (row " << ids[s] << ") value " << v;
      }
    }
    EXPECT_EQ(bad, 0u);
  }
}

TEST(GatherFastPath, EveryPeerVariantMatchesTheCpuRule) {
  ENGRAM_SKIP_WITHOUT_GPUS(1);
  ENGRAM_CUDA_OK(cudaSetDevice(0));
  const int dim = 256;
  kernels::RowLayout layout;
  layout.format = RowFormat::kFp8E4M3Ue8m0;
  layout.dim = dim;
  layout.row_bytes = row_bytes_of(layout.format, dim);
  const int64_t rows = 2001;
  const auto table = make_table(layout.format, dim, rows, 91);
  const std::vector<int64_t> starts{0, 701, 701, rows};  // shard 2 starts at an odd row count
  std::vector<DeviceBuffer> shards;
  std::vector<const void*> bases;
  for (size_t s = 0; s + 1 < starts.size(); ++s) {
    std::vector<uint8_t> part(table.begin() + starts[s] * static_cast<int64_t>(layout.row_bytes),
                              table.begin() + starts[s + 1] * static_cast<int64_t>(layout.row_bytes));
    part.resize(std::max<size_t>(part.size(), 1));
    shards.push_back(upload(part));
    bases.push_back(shards.back().get());
  }
  DeviceBuffer d_starts = upload(starts);
  DeviceBuffer d_bases = upload(bases);
  Rng rng(5);
  ASSERT_FALSE(kernels::peer_variants().empty());
  for (int64_t slots : {int64_t{1}, int64_t{3}, int64_t{64}, int64_t{67}, int64_t{1001}}) {
    auto ids = make_ids(static_cast<size_t>(slots), rows, starts, rng);
    ids[0] = rows - 1;  // the very last byte of the last shard is read, never past it
    const auto expected = reference_lookup(layout.format, dim, table, rows, ids);
    DeviceBuffer d_ids = upload(ids);
    DeviceBuffer d_out(0, static_cast<size_t>(slots) * dim * 2 + 512);
    kernels::GatherPeerArgs args;
    args.ids = d_ids.as<int64_t>();
    args.tokens = slots;
    args.heads = 1;
    args.shard_starts = d_starts.as<int64_t>();
    args.shard_bases = d_bases.as<const void* const>();
    args.shard_count = 3;
    args.layout = layout;
    args.out = d_out.as<uint16_t>();
    for (const kernels::PeerVariant& variant : kernels::peer_variants()) {
      SCOPED_TRACE(fmt::format("slots {} variant {}", slots, kernels::peer_variant_name(variant)));
      ENGRAM_CUDA_OK(cudaMemset(d_out.get(), 0xab, d_out.bytes()));
      ENGRAM_STATUS_OK(kernels::gather_peer_variant(args, variant, nullptr));
      ENGRAM_CUDA_OK(cudaDeviceSynchronize());
      const auto out = download(d_out);
      ASSERT_TRUE(same_bf16(expected, std::span(out).first(expected.size()), dim));
      for (size_t i = expected.size(); i < out.size(); ++i) ASSERT_EQ(out[i], 0xabab) << "written past the end at " << i;
    }
  }
}

TEST(GatherFastPath, AVariantNotCompiledInIsRefused) {
  ENGRAM_SKIP_WITHOUT_GPUS(1);
  ENGRAM_CUDA_OK(cudaSetDevice(0));
  kernels::RowLayout layout;
  layout.format = RowFormat::kFp8E4M3Ue8m0;
  layout.dim = 256;
  layout.row_bytes = row_bytes_of(layout.format, 256);
  DeviceBuffer d_ids(0, 64), d_out(0, 1024), d_table(0, 64);
  kernels::GatherPeerArgs args;
  args.ids = d_ids.as<int64_t>();
  args.tokens = 1;
  args.heads = 1;
  args.shard_starts = d_table.as<int64_t>();
  args.shard_bases = d_table.as<const void* const>();
  args.shard_count = 1;
  args.layout = layout;
  args.out = d_out.as<uint16_t>();
  const kernels::PeerVariant variant{3, true, false};
  ASSERT_TRUE(std::find(kernels::peer_variants().begin(), kernels::peer_variants().end(), variant) ==
              kernels::peer_variants().end());
  const Status refused = kernels::gather_peer_variant(args, variant, nullptr);
  EXPECT_EQ(refused.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("r3-w16 is not compiled in"), std::string::npos) << refused.to_string();
  // Every variant gather_peer dispatches to is compiled in.
  for (int64_t slots : {int64_t{1}, int64_t{1} << 20}) {
    const kernels::PeerVariant picked = kernels::peer_variant_for(slots);
    EXPECT_TRUE(std::find(kernels::peer_variants().begin(), kernels::peer_variants().end(), picked) !=
                kernels::peer_variants().end()) << kernels::peer_variant_name(picked);
  }
}

}  // namespace
}  // namespace engram::gpu_test
