// Emulated CUDA VMM: physical allocations on the GPUs of emulated hosts,
// shareable handles (POSIX fds in per-process fd tables, 64-byte FABRIC
// handles), per-process address spaces with reservations and mappings, and
// the driver's error codes and granularity rules. Contents are paged lazily
// (sim/paged_bytes.h), so V4.1-sized shards on 9,216 ranks cost only what is
// written, and bytes many ranks hold alike are held once.
#pragma once

#include <boost/container/flat_map.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/backend/device_memory.h"
#include "sim/paged_bytes.h"
#include "sim/sim_context.h"

namespace engram::sim {

// Driver and kernel state shared by every emulated process of one run.
class DeviceWorld {
 public:
  explicit DeviceWorld(SimContext& context);
  ~DeviceWorld();

  struct Physical {
    uint64_t id = 0;
    int host = -1;
    int gpu = -1;
    int creator_rank = -1;
    uint64_t bytes = 0;
    HandleType exportable_as = HandleType::kPosixFd;
    int references = 0;  // handles, mappings and open files that keep it alive
    PagedBytes contents;
  };
  struct Handle {
    uint64_t physical = 0;
    bool imported = false;
    uint64_t ledger_id = 0;
  };
  struct Reservation {
    uint64_t bytes = 0;
    uint64_t ledger_id = 0;
  };
  struct Mapping {
    uint64_t bytes = 0;
    uint64_t physical = 0;
    bool access = false;
    uint64_t ledger_id = 0;
  };
  struct OpenFd {
    uint64_t file = 0;
    uint64_t ledger_id = 0;
    bool received = false;
  };
  struct Process {
    // Sorted vectors, not node maps: a rank of a 72-GPU domain holds ~72
    // imports and mappings, and at 9,216 ranks a node per entry was a fifth
    // of the emulator's memory. Entries arrive mostly in key order.
    boost::container::flat_map<AllocationHandle, Handle> handles;
    boost::container::flat_map<DevicePtr, Reservation> reservations;
    boost::container::flat_map<DevicePtr, Mapping> mappings;
    boost::container::flat_map<int, OpenFd> fds;
    int next_fd = 3;
    DevicePtr next_address = 0;
  };

  Process& process(int rank) { return processes_[static_cast<size_t>(rank)]; }
  // Hosts by index: one machine (hostname and boot id), one non-empty
  // NVLink/IMEX domain.
  bool same_machine(int host_a, int host_b) const;
  bool same_nvlink_domain(int host_a, int host_b) const;
  Physical* physical(uint64_t id);
  uint64_t gpu_used_bytes(int host, int gpu) const;
  uint64_t physical_count() const { return physicals_live_; }

  // Files (open file descriptions): an export fd refers to one; the fd channel
  // moves references between processes.
  uint64_t new_file(uint64_t physical);
  void add_file_reference(uint64_t file);
  void drop_file_reference(uint64_t file);
  int install_fd(int rank, uint64_t file, bool received, uint64_t bytes);
  // The file behind `fd` in `rank`'s table, or 0.
  uint64_t file_of(int rank, int fd) const;
  uint64_t physical_of_file(uint64_t file) const;
  Status close_fd(int rank, int fd);

  void add_reference(uint64_t physical);
  void drop_reference(uint64_t physical);

  // What the driver and the OS do when a process dies: unmap, free the
  // reservations, release the handles, close the fds.
  void release_process(int rank);

  SimContext& context() { return context_; }

  // Bytes that many ranks write alike (every replica of a shard fills the
  // same rows), made by `make` once per run and kept for the run, so the
  // allocations they are written to hold them as one shared extent. Null
  // once keeping them would pass kSharedContentBytesMax: the caller then
  // writes bytes of its own.
  static constexpr uint64_t kSharedContentBytesMax = 256ull << 20;
  SharedBytes shared_content(const std::string& key, uint64_t bytes,
                             const std::function<void(std::span<std::byte>)>& make);

  // The non-negative int64 values of `ids` (8-byte words from its start)
  // with their word positions, sorted by value then position: what the
  // emulated gather of every member of a collective lookup searches instead
  // of scanning the group's ids. Built once per buffer while it lives.
  using SortedIds = std::vector<std::pair<int64_t, uint32_t>>;
  std::shared_ptr<const SortedIds> sorted_ids(const SharedBytes& ids);

 private:
  SimContext& context_;
  std::vector<Process> processes_;
  std::vector<int> machine_of_host_;  // by host index: hosts of one machine share the number
  std::vector<int> domain_of_host_;   // by host index: -1 in no domain
  // By id - 1: ids are dense (their own counter), so a lookup is an index,
  // not a hash walk; a freed one leaves a null slot.
  std::vector<std::unique_ptr<Physical>> physicals_;
  uint64_t physicals_live_ = 0;
  Physical& new_physical();
  struct File {
    uint64_t physical = 0;
    int references = 0;
  };
  std::unordered_map<uint64_t, File> files_;
  std::unordered_map<uint64_t, uint64_t> gpu_used_bytes_;  // (host << 16 | gpu) -> bytes
  std::unordered_map<std::string, SharedBytes> shared_content_;
  uint64_t shared_content_bytes_ = 0;
  struct IdsIndex {
    std::weak_ptr<const std::vector<std::byte>> ids;  // expired: the buffer is gone, the entry stale
    std::shared_ptr<const SortedIds> sorted;
  };
  std::unordered_map<const void*, IdsIndex> sorted_ids_;
  size_t sorted_ids_sweep_at_ = 16;

  friend class SimDeviceMemory;
};

class SimDeviceMemory final : public DeviceMemory {
 public:
  SimDeviceMemory(DeviceWorld& world, int rank);
  DeviceWorld& world() { return world_; }

  Result<DeviceInfo> info() override;
  Status probe_fabric() override;
  Result<AllocationHandle> create(uint64_t bytes, HandleType exportable_as) override;
  Result<ShareableHandle> export_handle(AllocationHandle allocation, HandleType type) override;
  Result<AllocationHandle> import_handle(const ShareableHandle& handle) override;
  Result<DevicePtr> reserve(uint64_t bytes) override;
  Status map(DevicePtr address, uint64_t bytes, AllocationHandle allocation) override;
  Status set_access(DevicePtr address, uint64_t bytes) override;
  Status unmap(DevicePtr address, uint64_t bytes) override;
  Status release(AllocationHandle allocation) override;
  Status free_reservation(DevicePtr address, uint64_t bytes) override;
  Status close_fd(int fd) override;
  Status copy_to_device(DevicePtr dst, std::span<const std::byte> src) override;
  Status copy_from_device(std::span<std::byte> dst, DevicePtr src) override;
  Status synchronize() override;

  // Writes zeros over [dst, dst + bytes) by dropping the pages it covers
  // (never-written memory reads as zeros): a zeroed buffer costs nothing.
  Status zero(DevicePtr dst, uint64_t bytes);
  // Writes `data` at dst as an extent shared with every other writer of the
  // same `data` (the emulated all-gather: one copy of the gathered bytes for
  // the whole group, not one per member); a ragged head or tail is copied.
  Status copy_to_device_shared(DevicePtr dst, const SharedBytes& data);
  // [src, src + bytes), checked readable as a copy checks it, when it lies
  // inside one shared extent; nullopt when it does not.
  Result<std::optional<SharedView>> shared_view(DevicePtr src, uint64_t bytes);
  // Calls fn(offset within the range, bytes) for each written part (a page
  // or a shared extent) in [src, src + bytes), in address order, clipped to
  // the range; the rest of the range reads as zeros. O(parts), not O(bytes).
  Status for_each_written(DevicePtr src, uint64_t bytes,
                          const std::function<void(uint64_t offset, std::span<const std::byte> bytes)>& fn);

 private:
  enum class FabricUse { kCreate, kImport };
  Status fabric_capability(const char* call, FabricUse use) const;
  // Walks [address, address + bytes) over consecutive accessible mappings.
  Status for_each_span(DevicePtr address, uint64_t bytes, const char* call,
                       const std::function<void(DeviceWorld::Physical&, uint64_t offset, uint64_t length,
                                                uint64_t done)>& fn);

  DeviceWorld& world_;
  SimContext& context_;
  int rank_;
};

}  // namespace engram::sim
