// Sharing device memory between the ranks of a group (DESIGN.md section 5):
// every rank creates an exportable allocation, the group exchanges the
// shareable handles, and every rank imports and maps every peer's allocation
// into one reserved address range. Written once, used by the peer-shard table
// and by any other consumer (shared_device_buffer.h).
//
// Agreement: the handle type is chosen before anyone allocates, from facts
// gathered from every rank, so all decide alike. After each phase the group
// all-gathers an ok/fail record, so when one rank fails every rank learns who
// and where, undoes its own work and returns; nobody waits for a peer that
// gave up. On any failure this rank leaves nothing behind: no mapping,
// reservation, imported handle, fd or allocation.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/backend/rank_backend.h"
#include "core/base/status.h"

namespace engram {

// This process's view of every group member's allocation, mapped at
// base + group_rank * stride, with access granted to the local device.
struct PeerMappings {
  DevicePtr base = 0;
  uint64_t stride_bytes = 0;                 // one allocation per slot
  std::vector<AllocationHandle> imported;    // per group rank; 0 = not imported (own slot or not reached)
  std::vector<bool> mapped;                  // per group rank
  uint64_t reserved_bytes() const { return stride_bytes * mapped.size(); }
};

struct ImportRequest {
  HandleType type = HandleType::kPosixFd;
  uint64_t allocation_bytes = 0;             // granularity-rounded, equal on every rank
  int group_rank = -1;
  std::vector<int> world_ranks;              // group rank -> world rank (for errors)
  AllocationHandle own_allocation = 0;       // mapped into this rank's own slot
};

// Yields group rank `peer`'s handle (for POSIX fds: receives it; the fd is
// then owned by import_and_map, which closes it after the import).
using HandleSource = std::function<Result<ShareableHandle>(int peer)>;

// The local half: reserve one range, then per group rank in order: fetch,
// import, map, grant access (the own slot maps own_allocation). On failure it
// undoes all of that and returns an error naming this rank, the peer (world
// rank) and the step (receive, import, map, access, reserve).
Result<PeerMappings> import_and_map(DeviceMemory& device, const ImportRequest& request, const HandleSource& fetch);
// Unmaps every mapped slot, releases every imported handle, frees the range.
// Keeps going past a failure; returns the first.
Status unmap_and_release(DeviceMemory& device, PeerMappings& mappings, int world_rank);

class SharedMapping {
 public:
  SharedMapping() = default;
  SharedMapping(SharedMapping&& other) noexcept { *this = std::move(other); }
  SharedMapping& operator=(SharedMapping&& other) noexcept;
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;
  // Without teardown(): undoes this rank's part locally (no collective; the
  // driver keeps peers' memory alive while they still map it).
  ~SharedMapping();

  bool valid() const { return device_ != nullptr; }
  HandleType handle_type() const { return type_; }
  uint64_t bytes_per_rank() const { return mappings_.stride_bytes; }   // granularity-rounded
  int group_rank() const { return group_rank_; }
  int group_size() const { return static_cast<int>(world_ranks_.size()); }
  int world_rank_of(int group_rank) const { return world_ranks_[static_cast<size_t>(group_rank)]; }
  // This process's address of group rank `peer`'s allocation (own included).
  DevicePtr peer(int peer) const;
  DevicePtr local() const { return peer(group_rank_); }
  std::vector<DevicePtr> peer_pointers() const;

  // Collective over the group that built it: synchronize users (barrier),
  // unmap, release the imports, free the range; then a barrier so every peer
  // has unmapped before this rank releases its own allocation.
  Status teardown();

 private:
  friend Result<SharedMapping> exchange_shareable_handles(RankBackend& backend, Collectives& group,
                                                          uint64_t bytes_per_rank);
  void release_locally();

  DeviceMemory* device_ = nullptr;
  Collectives* group_ = nullptr;
  int world_rank_ = -1;
  int group_rank_ = -1;
  HandleType type_ = HandleType::kPosixFd;
  std::vector<int> world_ranks_;
  AllocationHandle own_allocation_ = 0;
  PeerMappings mappings_;
};

// The whole exchange, collective over `group` (which must outlive the
// result): gather placement facts and fabric probes, choose the handle type,
// create `bytes_per_rank` rounded up to the granularity, export, exchange
// (FABRIC: all-gather 64-byte handles; POSIX: each rank sends its fd to every
// peer over backend.fds), check sizes, import and map every peer.
Result<SharedMapping> exchange_shareable_handles(RankBackend& backend, Collectives& group, uint64_t bytes_per_rank);

}  // namespace engram
