// The emulator's DeviceCompute: the same calls as a GPU, on emulated device
// memory (SimDeviceMemory), executed when they are enqueued (one emulated
// stream per rank, in order) with the CPU reference rules of the kernels
// (kernels/gather_reference.h). Workspaces are VMM allocations of this
// rank's GPU, so they count against its memory and show in the ledger; host
// registrations are ledger entries too, so one left registered is a leak.
// Device collectives run over the group's emulated Collectives, moving the
// bytes through emulated device memory.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <span>

#include "core/backend/device_compute.h"
#include "core/backend/device_resources.h"
#include "sim/sim_context.h"
#include "sim/sim_device_memory.h"

namespace engram::sim {

class SimDeviceCompute final : public DeviceCompute {
 public:
  SimDeviceCompute(SimContext& context, SimDeviceMemory& memory, int rank);

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
  // The name a fill's rows are kept under for the run (DeviceWorld::shared_content).
  static std::string table_rows_key(const TableSpec& table, uint64_t seed, int64_t first_row, int64_t rows);
  Status fill_table_rows(DevicePtr dst, const TableSpec& table, uint64_t seed, int64_t first_row, int64_t rows,
                         StreamRef stream) override;
  // The request hasher's steps by the CPU reference (kernels/request_hash_reference.h)
  // on emulated device memory.
  Status hash_requests(const DeviceRequestHash& args, StreamRef stream) override;
  Status commit_requests(const DeviceRequestCommit& args, StreamRef stream) override;
  Status synchronize(StreamRef stream) override;
  // Keeps `enqueue`; each replay calls it again (the emulator executes at
  // enqueue, so a replay is the calls themselves).
  Result<std::unique_ptr<DeviceGraph>> capture(const std::function<Status(StreamRef)>& enqueue) override;
  Result<std::unique_ptr<DeviceCollectives>> connect(Collectives& bootstrap) override;

  // What the driver and the OS undo when the process dies: its host
  // registrations (its allocations go with DeviceWorld::release_process).
  void release_process();

  // Reads and writes any address this rank's device can reach: its mappings
  // and registered host memory. Errors as the driver's (illegal address).
  Status read(DevicePtr src, std::span<std::byte> dst, const char* call);
  Status write(DevicePtr dst, std::span<const std::byte> src, const char* call);
  // write() of bytes every member of a group receives alike: in device
  // memory one extent shared by the members (copied out on a later write).
  Status write_shared(DevicePtr dst, const SharedBytes& data, const char* call);
  // The written parts of [src, src + bytes), in order (device memory: its
  // written pages; registered host memory: all of it); the rest is zeros.
  Status for_each_written(DevicePtr src, uint64_t bytes, const char* call,
                          const std::function<void(uint64_t offset, std::span<const std::byte> bytes)>& fn);

 private:
  struct Registration {
    std::span<const std::byte> host;
    uint64_t ledger_id = 0;
  };
  // The registration holding [address, address + bytes), or null.
  const Registration* registered(DevicePtr address, uint64_t bytes, DevicePtr* base) const;
  Status alive(const char* call) const;
  // The owned-rows gather when its ids are one shared extent (a collective
  // lookup's all-gathered ids, the same buffer on every member): the ids in
  // the owned range are found in the buffer's sorted index, so a member's
  // gather costs the rows it owns, not the group's ids. False: not such ids.
  Result<bool> gather_owned_from_index(const DeviceGather& args, const char* call);
  // A request state's buffers read into `host` (its spans over `words`), and written back.
  struct RequestStateCopy;
  Status read_request_state(const DeviceRequestState& state, const char* call, RequestStateCopy& copy);
  Status write_request_state(const DeviceRequestState& state, const char* call, RequestStateCopy& copy);

  SimContext& context_;
  SimDeviceMemory& memory_;
  int rank_;
  // Workspaces by address. A dead rank's are gone with its process
  // (DeviceWorld::release_process); the owners then give back nothing.
  std::map<DevicePtr, MappedAllocation> allocations_;
  std::map<DevicePtr, Registration> registrations_;  // by the device address handed out
  DevicePtr next_host_address_;
  int64_t prepared_ids_max_ = 0;
  uint64_t prepared_row_bytes_max_ = 0;
};

}  // namespace engram::sim
