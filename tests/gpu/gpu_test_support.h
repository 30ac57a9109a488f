// Helpers for the GPU tests: visible skips where GPUs are missing, CUDA
// error checks, device buffers, table filling and the CPU reference lookup.
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <span>
#include <vector>

#include "backends/cuda/cuda_driver.h"
#include "core/backend/collectives.h"
#include "core/base/bf16.h"
#include "core/model/table_spec.h"

#if __has_include("core/model/row_format.h")
#include "core/model/row_format.h"
#define ENGRAM_TEST_HAVE_ROW_FORMAT 1
#endif

namespace engram::gpu_test {

#define ENGRAM_SKIP_WITHOUT_GPUS(needed)                                                              \
  do {                                                                                                \
    const auto presence_ = ::engram::cuda::gpu_presence();                                            \
    if (presence_.count == 0) GTEST_SKIP() << "no GPU: " << presence_.reason;                         \
    if (presence_.count < (needed))                                                                   \
      GTEST_SKIP() << "needs " << (needed) << " GPUs; this machine has " << presence_.count;          \
  } while (0)

#define ENGRAM_CUDA_OK(expr)                                                                          \
  do {                                                                                                \
    const cudaError_t error_ = (expr);                                                                \
    ASSERT_EQ(error_, cudaSuccess) << #expr << ": " << cudaGetErrorName(error_) << " ("               \
                                   << cudaGetErrorString(error_) << ")";                              \
  } while (0)

#define ENGRAM_STATUS_OK(expr)                                  \
  do {                                                          \
    const ::engram::Status status_ = (expr);                    \
    ASSERT_TRUE(status_.is_ok()) << #expr << ": " << status_.to_string(); \
  } while (0)

// cudaMalloc'ed memory on one GPU, freed on that GPU.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // The allocation is rounded up to 16 bytes: the fast gather path reads a
  // shard's 16-byte-rounded extent (kernels/gather_kernels.h), which every
  // VMM shard has; memcheck holds tests to exactly that much.
  DeviceBuffer(int device, size_t bytes) : device_(device), bytes_(bytes) {
    cudaSetDevice(device);
    if (cudaMalloc(&ptr_, bytes == 0 ? 16 : (bytes + 15) / 16 * 16) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) {
      cudaSetDevice(device_);
      cudaFree(ptr_);
    }
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(device_, other.device_);
    std::swap(ptr_, other.ptr_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  int device_ = -1;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// splitmix64: fast, seeded, the same everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return next() % n; }

 private:
  uint64_t state_;
};

inline uint64_t row_bytes_of(RowFormat format, int dim) {
  return format == RowFormat::kFp8E4M3Ue8m0 ? static_cast<uint64_t>(dim + dim / kScaleBlock)
                                            : static_cast<uint64_t>(dim) * 2;
}

// Random rows that include the values the rule treats specially: FP8 -0,
// both NaNs, subnormals and +-448; scales 0 (gives 0), 255 (gives inf), 1
// and 254 (float-subnormal and huge products); bf16 -0, NaNs, infinities.
inline std::vector<uint8_t> make_table(RowFormat format, int dim, int64_t rows, uint64_t seed) {
  const uint64_t row_bytes = row_bytes_of(format, dim);
  std::vector<uint8_t> table(static_cast<size_t>(rows) * row_bytes);
  Rng rng(seed);
  for (size_t i = 0; i + 8 <= table.size(); i += 8) {
    uint64_t v = rng.next();
    std::memcpy(&table[i], &v, 8);
  }
  for (size_t i = table.size() / 8 * 8; i < table.size(); ++i) table[i] = static_cast<uint8_t>(rng.next());
  static constexpr uint8_t kSpecialFp8[] = {0x80, 0x00, 0x7f, 0xff, 0x01, 0x81, 0x07, 0x7e, 0xfe, 0x08};
  static constexpr uint8_t kSpecialScale[] = {0, 255, 1, 254, 127, 100, 140};
  static constexpr uint16_t kSpecialBf16[] = {0x8000, 0x0000, 0x7fc1, 0xffff, 0x7f80, 0xff80, 0x0001, 0x8001};
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = &table[static_cast<size_t>(r) * row_bytes];
    if (format == RowFormat::kFp8E4M3Ue8m0) {
      // Most scales near 1 so values are ordinary; the specials appear often.
      for (int b = 0; b < dim / kScaleBlock; ++b) {
        uint64_t pick = rng.below(16);
        row[dim + b] = pick < 4 ? kSpecialScale[rng.below(std::size(kSpecialScale))]
                                : static_cast<uint8_t>(110 + rng.below(40));
      }
      for (int k = 0; k < 4; ++k) row[rng.below(static_cast<uint64_t>(dim))] = kSpecialFp8[rng.below(std::size(kSpecialFp8))];
    } else {
      for (int k = 0; k < 4; ++k) {
        uint16_t v = kSpecialBf16[rng.below(std::size(kSpecialBf16))];
        std::memcpy(row + 2 * rng.below(static_cast<uint64_t>(dim)), &v, 2);
      }
    }
  }
  return table;
}

// The lookup rule on the CPU: core/model/row_format's when it is in the tree, else
// the same rule written out here.
inline void reference_row(RowFormat format, int dim, const uint8_t* row, uint16_t* out) {
#ifdef ENGRAM_TEST_HAVE_ROW_FORMAT
  dequantize_row(format, dim, ScaleByteRule::kVllm, std::span(reinterpret_cast<const std::byte*>(row), row_bytes_of(format, dim)),
                 std::span(out, static_cast<size_t>(dim)));
#else
  auto canonical = [](uint16_t bits) -> uint16_t {
    if (bits == 0x8000u) return 0;
    if (bf16_is_nan(bits)) return static_cast<uint16_t>(0x7fc0u | (bits & 0x8000u));
    return bits;
  };
  for (int i = 0; i < dim; ++i) {
    if (format == RowFormat::kBf16) {
      uint16_t v;
      std::memcpy(&v, row + 2 * i, 2);
      out[i] = canonical(v);
      continue;
    }
    const uint8_t b = row[i];
    const int e = (b >> 3) & 0xf, m = b & 7;
    float magnitude;
    if (e == 0xf && m == 7) magnitude = std::bit_cast<float>(0x7fc00000u);
    else if (e == 0) magnitude = static_cast<float>(m) / 512.0f;
    else magnitude = std::bit_cast<float>((static_cast<uint32_t>(e + 120) << 23) | (static_cast<uint32_t>(m) << 20));
    const float value = (b & 0x80) ? -magnitude : magnitude;
    const float scale = std::bit_cast<float>(static_cast<uint32_t>(row[dim + i / kScaleBlock]) << 23);
    out[i] = canonical(float_to_bf16(value * scale));
  }
#endif
}

// Expected output of a peer lookup: a zero row for DEAD / out-of-range ids.
inline std::vector<uint16_t> reference_lookup(RowFormat format, int dim, const std::vector<uint8_t>& table,
                                              int64_t rows, std::span<const int64_t> ids) {
  const uint64_t row_bytes = row_bytes_of(format, dim);
  std::vector<uint16_t> out(ids.size() * static_cast<size_t>(dim), 0);
  for (size_t s = 0; s < ids.size(); ++s) {
    if (ids[s] < 0 || ids[s] >= rows) continue;
    reference_row(format, dim, &table[static_cast<size_t>(ids[s]) * row_bytes], &out[s * static_cast<size_t>(dim)]);
  }
  return out;
}

// Bitwise equality, every NaN one value (docs/design.md section 4). Reports the
// first few differences.
inline ::testing::AssertionResult same_bf16(std::span<const uint16_t> expected, std::span<const uint16_t> actual,
                                            int dim) {
  if (expected.size() != actual.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << expected.size() << " vs " << actual.size();
  }
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (bf16_same(expected[i], actual[i])) continue;
    if (++bad <= 5) {
      first += fmt::format(" [slot {} value {}: expected {:#06x}, got {:#06x}]", i / static_cast<size_t>(dim),
                           i % static_cast<size_t>(dim), expected[i], actual[i]);
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << expected.size() << " values differ:" << first;
}

// Ids with DEAD, negative, past-the-end and extreme values mixed in with
// shard boundaries and random rows.
inline std::vector<int64_t> make_ids(size_t count, int64_t rows, std::span<const int64_t> boundaries, Rng& rng) {
  std::vector<int64_t> ids(count);
  for (auto& id : ids) {
    uint64_t pick = rng.below(100);
    if (pick < 10) id = kDeadId;
    else if (pick < 12) id = rows + static_cast<int64_t>(rng.below(1000));
    else if (pick < 13) id = INT64_MAX;
    else if (pick < 14) id = INT64_MIN;
    else if (pick < 15) id = -2;
    else if (pick < 20 && !boundaries.empty()) {
      int64_t b = boundaries[rng.below(boundaries.size())];
      id = b - 1 + static_cast<int64_t>(rng.below(2));
    } else {
      id = static_cast<int64_t>(rng.below(static_cast<uint64_t>(rows)));
    }
  }
  return ids;
}

// A bootstrap for ranks that are threads of this process: every call blocks
// until all ranks made it, like the TCP collectives do across processes.
class ThreadCollectivesHub {
 public:
  explicit ThreadCollectivesHub(int size) : size_(size), deposits_(static_cast<size_t>(size)) {}

  // Each rank deposits `mine`; `consume` reads every rank's deposit.
  template <typename Consume>
  void exchange(int rank, std::span<const std::byte> mine, Consume consume) {
    std::unique_lock lock(mutex_);
    const uint64_t round = round_;
    deposits_[static_cast<size_t>(rank)].assign(mine.begin(), mine.end());
    if (++arrived_ == size_) {
      arrived_ = 0;
      readers_ = 0;
      ++round_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return round_ != round; });
    }
    consume(deposits_);
    // The deposits stay until every rank has read them.
    if (++readers_ == size_) {
      ++read_round_;
      cv_.notify_all();
    } else {
      const uint64_t reading = read_round_;
      cv_.wait(lock, [&] { return read_round_ != reading; });
    }
  }
  int size() const { return size_; }

 private:
  int size_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::vector<std::byte>> deposits_;
  int arrived_ = 0;
  int readers_ = 0;
  uint64_t round_ = 0;
  uint64_t read_round_ = 0;
};

class ThreadCollectives final : public Collectives {
 public:
  ThreadCollectives(ThreadCollectivesHub& hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return hub_.size(); }
  int world_rank() const override { return rank_; }
  Status all_gather(std::span<const std::byte> mine, std::span<std::byte> all) override {
    if (all.size() != mine.size() * static_cast<size_t>(size())) return invalid_argument("all_gather: all.size()");
    hub_.exchange(rank_, mine, [&](const std::vector<std::vector<std::byte>>& deposits) {
      for (size_t r = 0; r < deposits.size(); ++r) std::memcpy(all.data() + r * mine.size(), deposits[r].data(), mine.size());
    });
    return Status::ok();
  }
  Status reduce_scatter_sum_bf16(std::span<const uint16_t> input, std::span<uint16_t> output) override {
    hub_.exchange(rank_, std::as_bytes(input), [&](const std::vector<std::vector<std::byte>>& deposits) {
      std::vector<std::span<const uint16_t>> inputs;
      for (const auto& d : deposits) inputs.emplace_back(reinterpret_cast<const uint16_t*>(d.data()), d.size() / 2);
      reduce_scatter_sum_bf16_reference(inputs, rank_, output);
    });
    return Status::ok();
  }
  Status all_to_all(std::span<const std::byte> send, std::span<std::byte> receive) override {
    const size_t chunk = send.size() / static_cast<size_t>(size());
    hub_.exchange(rank_, send, [&](const std::vector<std::vector<std::byte>>& deposits) {
      for (size_t r = 0; r < deposits.size(); ++r)
        std::memcpy(receive.data() + r * chunk, deposits[r].data() + static_cast<size_t>(rank_) * chunk, chunk);
    });
    return Status::ok();
  }
  Status barrier() override {
    hub_.exchange(rank_, {}, [](const auto&) {});
    return Status::ok();
  }
  Result<std::unique_ptr<Collectives>> split(int, int) override {
    return failed_precondition("ThreadCollectives (GPU test bootstrap) does not split groups");
  }

 private:
  ThreadCollectivesHub& hub_;
  int rank_;
};

}  // namespace engram::gpu_test
