// DeviceCompute on one real GPU: cudaMalloc workspaces, cudaHostRegister'ed
// host tables, the gather kernels (kernels/), the device table fill, the
// request hasher's kernels (kernels/request_hash.h), NCCL
// communicators bootstrapped over a group's host Collectives, and the host
// row stager for host tables at large token counts.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "backends/cuda/host_row_stager.h"
#include "core/backend/device_compute.h"

namespace engram::cuda {

struct CudaComputeOptions {
  // Host-table lookups of at least this many rows gather on the CPU and
  // copy (host_row_stager.h); below it the kernel reads host memory itself.
  int64_t staged_rows_min = 16384;
  int stager_threads = 8;
  // Of a staged lookup's tokens, the share the kernel reads itself while the
  // CPU gathers the rest (host_row_stager.h). The two rates add; 0.4 was
  // the best of 0-0.5 on one H200 with 16 cores (a 64 GiB /dev/shm table,
  // 8,192 tokens: 2.94 ms against the plain kernel's 6.95, docs/perf_notes.md).
  double direct_fraction = 0.4;
};

class CudaDeviceCompute final : public DeviceCompute {
 public:
  CudaDeviceCompute(int ordinal, CudaComputeOptions options = {});
  ~CudaDeviceCompute() override;  // frees what the owner did not (and says nothing: a teardown path)
  CudaDeviceCompute(const CudaDeviceCompute&) = delete;
  CudaDeviceCompute& operator=(const CudaDeviceCompute&) = delete;

  int ordinal() const { return ordinal_; }

  Result<DevicePtr> allocate(uint64_t bytes) override;
  Status free(DevicePtr address) override;
  Status prepare_lookups(int64_t ids_max, uint64_t row_bytes_max, bool host_tables) override;
  Result<DevicePtr> register_host(std::span<const std::byte> host) override;
  Status unregister_host(std::span<const std::byte> host) override;
  Status copy_to_device(DevicePtr dst, std::span<const std::byte> src) override;
  Status copy_to_host(std::span<std::byte> dst, DevicePtr src) override;
  Status copy_to_host_strided(std::span<std::byte> dst, DevicePtr src, uint64_t row_bytes,
                              uint64_t src_pitch_bytes) override;
  Status copy_async(DevicePtr dst, DevicePtr src, uint64_t bytes, StreamRef stream) override;
  Status fill_async(DevicePtr dst, uint8_t value, uint64_t bytes, StreamRef stream) override;
  Status gather(const DeviceGather& args, StreamRef stream) override;
  Status fill_table_rows(DevicePtr dst, const TableSpec& table, uint64_t seed, int64_t first_row, int64_t rows,
                         StreamRef stream) override;
  Status hash_requests(const DeviceRequestHash& args, StreamRef stream) override;
  Status commit_requests(const DeviceRequestCommit& args, StreamRef stream) override;
  Status synchronize(StreamRef stream) override;
  Result<std::unique_ptr<DeviceGraph>> capture(const std::function<Status(StreamRef)>& enqueue) override;
  Result<std::unique_ptr<DeviceCollectives>> connect(Collectives& bootstrap) override;

 private:
  Status make_current(const char* step);
  Status launch_error(const char* call, const char* step);

  int ordinal_;
  CudaComputeOptions options_;
  std::set<DevicePtr> allocations_;
  std::map<DevicePtr, std::span<const std::byte>> registrations_;  // device address -> host bytes
  std::unique_ptr<HostRowStager> stager_;  // made by prepare_lookups, for host tables
};

}  // namespace engram::cuda
