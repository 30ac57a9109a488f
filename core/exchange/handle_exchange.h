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
#include <span>
#include <vector>

#include "core/backend/device_resources.h"
#include "core/backend/rank_backend.h"
#include "core/base/status.h"

namespace engram {

// This process's view of every group member's allocation: one reserved
// range, member p's allocation mapped at base + p * stride with access
// granted; the peers' imported handles held until unmapped. Members are
// declared so that destruction unmaps, then releases the imports, then
// frees the range (core/backend/device_resources.h).
struct PeerMappings {
  DeviceRange range;
  uint64_t stride_bytes = 0;               // one allocation per slot
  std::vector<DeviceAllocation> imported;  // per group rank; empty for the own slot or one not reached
  std::vector<DeviceMapping> slots;        // per group rank; empty where not reached
  DevicePtr slot(int group_rank) const { return range.address() + static_cast<uint64_t>(group_rank) * stride_bytes; }
  // Unmaps every slot, releases every import, frees the range; carries on
  // past a failure and returns the first, with this rank.
  Status release(int world_rank);
};

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
  DeviceAllocation own_allocation_;  // released last: peers map it until the final barrier
  PeerMappings mappings_;
};

// The whole exchange, collective over `group` (which must outlive the
// result): gather placement facts and fabric probes, choose the handle type,
// create `bytes_per_rank` rounded up to the granularity, export, exchange
// (FABRIC: all-gather 64-byte handles; POSIX: each rank sends its fd to every
// peer over backend.fds), check sizes, import and map every peer.
Result<SharedMapping> exchange_shareable_handles(RankBackend& backend, Collectives& group, uint64_t bytes_per_rank);

}  // namespace engram
