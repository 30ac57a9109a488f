// The DeviceCompute of a rank whose libcuda.so.1 is the emulated driver
// (backends/emulated_driver). That driver runs no kernels, streams or NCCL,
// but its device pointers are this process's memory (cuMemMap is an mmap of
// the allocation's memfd), so what a lookup enqueues runs here, on the CPU,
// when it is enqueued: the table fill by core/model/table_fill.h, the gather
// by the kernels' CPU reference (kernels/gather_reference.h) reading every
// row through the mappings the real backend made and imported. A device_peer
// rank thus reads its peers' shards through the FABRIC or POSIX-fd imports
// the exchange under test made, and its lookups can be compared with the
// emulator's. What has no CPU stand-in here is refused, naming the call and
// the emulated driver: NCCL (connect: device_collective, device_head_sharded,
// the collective cross-check) and the device request hasher.
//
// Chosen by backends/ranks/rank_device.cc when cuda::emulated_host() says
// the driver is the emulated one; never on a real driver, whose device
// pointers the CPU cannot read.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "core/backend/device_compute.h"

namespace engram::cuda {

class EmulatedDriverCompute final : public DeviceCompute {
 public:
  explicit EmulatedDriverCompute(int ordinal) : ordinal_(ordinal) {}

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
  // Keeps `enqueue`; a replay runs it again (calls execute when enqueued).
  Result<std::unique_ptr<DeviceGraph>> capture(const std::function<Status(StreamRef)>& enqueue) override;
  Result<std::unique_ptr<DeviceCollectives>> connect(Collectives& bootstrap) override;

 private:
  // failed_precondition naming `call` and why the emulated driver cannot run it.
  Status refused(const char* call, const char* what) const;

  int ordinal_;
  std::map<DevicePtr, std::unique_ptr<std::byte[]>> workspaces_;  // by address
  std::map<const std::byte*, uint64_t> registered_;                // host start -> bytes
  int64_t prepared_ids_max_ = 0;
};

}  // namespace engram::cuda
