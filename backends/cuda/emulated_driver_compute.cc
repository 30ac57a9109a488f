#include "backends/cuda/emulated_driver_compute.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>

#include "core/model/table_fill.h"
#include "kernels/gather_reference.h"

namespace engram::cuda {
namespace {

// Device addresses are this process's addresses under the emulated driver.
std::byte* at(DevicePtr address) { return reinterpret_cast<std::byte*>(static_cast<uintptr_t>(address)); }

class ReplayedCalls final : public DeviceGraph {
 public:
  explicit ReplayedCalls(std::function<Status(StreamRef)> enqueue) : enqueue_(std::move(enqueue)) {}
  Status replay() override { return enqueue_({}); }
  Result<std::vector<double>> time(int warmup, int replays) override {
    for (int i = 0; i < warmup; ++i) ENGRAM_RETURN_IF_ERROR(enqueue_({}));
    std::vector<double> us;
    for (int i = 0; i < replays; ++i) {
      const auto started = std::chrono::steady_clock::now();
      ENGRAM_RETURN_IF_ERROR(enqueue_({}));
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - started).count());
    }
    return us;
  }

 private:
  std::function<Status(StreamRef)> enqueue_;
};

}  // namespace

Status EmulatedDriverCompute::refused(const char* call, const char* what) const {
  return Status(ErrorCode::kFailedPrecondition,
                fmt::format("{}: GPU {} is the engramlab emulated driver's, which runs no kernels, streams or NCCL "
                            "({}); run this part on a GPU",
                            call, ordinal_, what),
                {-1, -1, call});
}

Result<DevicePtr> EmulatedDriverCompute::allocate(uint64_t bytes) {
  // Plain memory of this process, as cudaMalloc's would be of the GPU: the
  // emulated GPU's VMM ledger holds the tables, not the lookup workspaces.
  auto memory = std::unique_ptr<std::byte[]>(new (std::nothrow) std::byte[std::max<uint64_t>(bytes, 1)]());
  if (memory == nullptr)
    return Status(ErrorCode::kResourceExhausted, fmt::format("cudaMalloc({} bytes): out of host memory", bytes),
                  {-1, -1, "allocate"});
  const DevicePtr address = reinterpret_cast<uintptr_t>(memory.get());
  workspaces_.emplace(address, std::move(memory));
  return address;
}

Status EmulatedDriverCompute::free(DevicePtr address) {
  if (workspaces_.erase(address) == 0)
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("cudaFree({:#x}): not an allocation of this rank's device compute", address),
                  {-1, -1, "free"});
  return Status::ok();
}

Status EmulatedDriverCompute::prepare_lookups(int64_t ids_max, uint64_t row_bytes_max, bool host_tables) {
  if (ids_max <= 0 || row_bytes_max == 0)
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("prepare_lookups: ids_max {} and row_bytes_max {} must be positive", ids_max,
                              row_bytes_max),
                  {-1, -1, "prepare lookups"});
  if (host_tables) prepared_ids_max_ = ids_max;
  return Status::ok();
}

Result<DevicePtr> EmulatedDriverCompute::register_host(std::span<const std::byte> host) {
  if (host.empty())
    return Status(ErrorCode::kInvalidArgument, "cudaHostRegister: the host range is empty", {-1, -1, "register host"});
  for (const auto& [start, bytes] : registered_)
    if (host.data() < start + bytes && start < host.data() + host.size())
      return Status(ErrorCode::kInvalidArgument,
                    "cudaHostRegister: cudaErrorHostMemoryAlreadyRegistered: part of this range is registered",
                    {-1, -1, "register host"});
  registered_[host.data()] = host.size();
  return reinterpret_cast<uintptr_t>(host.data());
}

Status EmulatedDriverCompute::unregister_host(std::span<const std::byte> host) {
  if (registered_.erase(host.data()) == 0)
    return Status(ErrorCode::kInvalidArgument,
                  "cudaHostUnregister: cudaErrorHostMemoryNotRegistered: that range was never registered",
                  {-1, -1, "unregister host"});
  return Status::ok();
}

Status EmulatedDriverCompute::copy_to_device(DevicePtr dst, std::span<const std::byte> src) {
  if (!src.empty()) std::memcpy(at(dst), src.data(), src.size());
  return Status::ok();
}

Status EmulatedDriverCompute::copy_to_host(std::span<std::byte> dst, DevicePtr src) {
  if (!dst.empty()) std::memcpy(dst.data(), at(src), dst.size());
  return Status::ok();
}

Status EmulatedDriverCompute::copy_to_host_strided(std::span<std::byte> dst, DevicePtr src, uint64_t row_bytes,
                                                   uint64_t src_pitch_bytes) {
  ENGRAM_RETURN_IF_ERROR(check_strided_copy(dst.size(), row_bytes, src_pitch_bytes, -1));
  for (uint64_t k = 0; k < dst.size() / row_bytes; ++k)
    std::memcpy(dst.data() + k * row_bytes, at(src) + k * src_pitch_bytes, row_bytes);
  return Status::ok();
}

Status EmulatedDriverCompute::copy_async(DevicePtr dst, DevicePtr src, uint64_t bytes, StreamRef) {
  if (bytes > 0) std::memmove(at(dst), at(src), bytes);
  return Status::ok();
}

Status EmulatedDriverCompute::fill_async(DevicePtr dst, uint8_t value, uint64_t bytes, StreamRef) {
  if (bytes > 0) std::memset(at(dst), value, bytes);
  return Status::ok();
}

Status EmulatedDriverCompute::gather(const DeviceGather& a, StreamRef) {
  ENGRAM_RETURN_IF_ERROR(check_gather(a, -1, prepared_ids_max_));
  if (a.tokens == 0) return Status::ok();
  const TableSpec table = row_decode_spec(a.layout);
  const auto* ids = reinterpret_cast<const int64_t*>(at(a.ids));
  const auto* starts = reinterpret_cast<const int64_t*>(at(a.shard_starts));
  const auto* bases = reinterpret_cast<const DevicePtr*>(at(a.shard_bases));
  auto* out = reinterpret_cast<uint16_t*>(at(a.out));
  const size_t dim = static_cast<size_t>(a.layout.dim);
  const int64_t slots = a.tokens * a.head_count;
  for (int64_t slot = 0; slot < slots; ++slot) {
    const int64_t id = ids[(slot / a.head_count) * a.ids_per_token + a.head_begin + slot % a.head_count];
    const std::byte* row = nullptr;
    if (a.shard_count > 0) {
      if (id >= 0 && id < starts[a.shard_count]) {
        // The owner is the last shard whose start <= id, as the kernel finds it.
        const int64_t owner = std::upper_bound(starts, starts + a.shard_count, id) - starts - 1;
        row = at(bases[owner]) + static_cast<uint64_t>(id - starts[owner]) * a.layout.row_bytes;
      }
    } else if (id >= a.range_first_row && id < a.range_first_row + a.range_row_count) {
      row = at(a.range_base) + static_cast<uint64_t>(id - a.range_first_row) * a.layout.row_bytes;
    }
    std::span<uint16_t> values(out + static_cast<size_t>(slot) * dim, dim);
    if (row != nullptr) kernels::row_reference(table, {row, table.row_bytes()}, values);
    else if (a.zero_missing) std::fill(values.begin(), values.end(), uint16_t{0});
  }
  return Status::ok();
}

Status EmulatedDriverCompute::fill_table_rows(DevicePtr dst, const TableSpec& table, uint64_t seed, int64_t first_row,
                                              int64_t rows, StreamRef) {
  if (first_row < 0 || rows < 0 || first_row + rows > table.row_count())
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("fill_table_rows: rows [{}, {}) are not inside the table's {} rows", first_row,
                              first_row + rows, table.row_count()),
                  {-1, -1, "fill"});
  engram::fill_table_rows(table, seed, first_row, {at(dst), static_cast<size_t>(rows) * table.row_bytes()});
  return Status::ok();
}

Status EmulatedDriverCompute::hash_requests(const DeviceRequestHash&, StreamRef) {
  return refused("hash_requests", "the device request hasher is a kernel");
}

Status EmulatedDriverCompute::commit_requests(const DeviceRequestCommit&, StreamRef) {
  return refused("commit_requests", "the device request hasher is a kernel");
}

Status EmulatedDriverCompute::synchronize(StreamRef) { return Status::ok(); }

Result<std::unique_ptr<DeviceGraph>> EmulatedDriverCompute::capture(const std::function<Status(StreamRef)>& enqueue) {
  return std::unique_ptr<DeviceGraph>(std::make_unique<ReplayedCalls>(enqueue));
}

Result<std::unique_ptr<DeviceCollectives>> EmulatedDriverCompute::connect(Collectives&) {
  return refused("ncclCommInitRank", "device collectives are NCCL's");
}

}  // namespace engram::cuda
