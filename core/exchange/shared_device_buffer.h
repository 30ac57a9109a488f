// A buffer of N bytes per rank that every rank of a group can read and
// write through its peers' pointers: the generic consumer of the handle
// exchange's single-allocation form. Same routine as the peer-shard table
// and the weight-sharing transport (weight_sharing.h).
#pragma once

#include <cstdint>
#include <span>

#include "core/exchange/handle_exchange.h"

namespace engram {

class SharedDeviceBuffer {
 public:
  // Collective over `group` (which must outlive the buffer).
  static Result<SharedDeviceBuffer> create(RankBackend& backend, Collectives& group, uint64_t bytes_per_rank);

  uint64_t bytes_per_rank() const { return bytes_per_rank_; }        // as asked
  uint64_t allocation_bytes() const { return mapping_.bytes_per_rank(); }  // rounded to the granularity
  int group_rank() const { return mapping_.group_rank(); }
  int group_size() const { return mapping_.group_size(); }
  HandleType handle_type() const { return mapping_.handle_type(); }
  DevicePtr local() const { return mapping_.local(); }
  DevicePtr peer(int group_rank) const { return mapping_.peer(group_rank); }

  // Bounds-checked copies into and out of any member's part.
  Status write(int group_rank, uint64_t offset, std::span<const std::byte> bytes);
  Status read(int group_rank, uint64_t offset, std::span<std::byte> bytes) const;

  Status teardown() { return mapping_.teardown(); }

 private:
  SharedDeviceBuffer(RankBackend& backend, SharedMapping mapping, uint64_t bytes_per_rank)
      : backend_(&backend), mapping_(std::move(mapping)), bytes_per_rank_(bytes_per_rank) {}
  Status check(int group_rank, uint64_t offset, uint64_t length, const char* step) const;

  RankBackend* backend_;
  SharedMapping mapping_;
  uint64_t bytes_per_rank_;
};

}  // namespace engram
