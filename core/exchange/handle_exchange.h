// Sharing device memory between the ranks of a group (docs/design.md section 5):
// every rank creates a list of exportable chunks (counts and sizes may differ
// between ranks), the group exchanges the shareable handles, and every rank
// imports and maps every peer's chunks into one span per peer of one reserved
// address range. Written once, used by the peer-shard table, shared device
// buffers (one chunk per rank) and the weight-sharing transport (one chunk
// per named tensor: weight_sharing.h).
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

// What a caller may ask of the list form beyond its chunks.
struct ChunkExchangeOptions {
  // Bytes reserved for each peer's span, equal on every rank; every rank's
  // chunks must fit in it. 0: each peer's span is exactly its chunks.
  uint64_t span_bytes_per_peer = 0;
  // Per group rank, how many chunks this rank expects that peer to announce
  // (a consumer that knows the peers' lists from its own metadata); empty:
  // whatever each announces.
  std::vector<int> expected_chunk_counts;
  // Round each chunk up to the granularity instead of refusing one that is
  // not a multiple (the single-allocation form; sizes as asked otherwise).
  bool round_up_to_granularity = false;
  // Every rank must ask for the same bytes (the single-allocation form's rule).
  bool require_equal_sizes = false;
  // Where no handle type works for the group, give every rank plain
  // (kNone, not exportable) memory for its own chunks instead of failing;
  // the result then says why it is not shared. Equal on every rank.
  bool allow_unshared = false;
};

// This process's view of every member's chunks: one reserved range holding
// one span per member, its chunks mapped back to back from the span's start
// with access granted; the peers' imported handles held until unmapped.
// Members are declared so that destruction unmaps, then releases the
// imports, then frees the range (core/backend/device_resources.h).
struct PeerMappings {
  DeviceRange range;
  std::vector<DeviceAllocation> imported;  // peers' chunks, in mapping order
  std::vector<DeviceMapping> chunks;       // every mapped chunk, own included, in mapping order
  // Unmaps every chunk, releases every import, frees the range; carries on
  // past a failure and returns the first, with this rank.
  Status release(int world_rank);
};

// Every member's list of chunks, mapped in this process (or, unshared, this
// rank's own alone).
class SharedChunks {
 public:
  SharedChunks() = default;
  SharedChunks(SharedChunks&& other) noexcept { *this = std::move(other); }
  SharedChunks& operator=(SharedChunks&& other) noexcept;
  SharedChunks(const SharedChunks&) = delete;
  SharedChunks& operator=(const SharedChunks&) = delete;
  // Without teardown(): undoes this rank's part locally (no collective; the
  // driver keeps peers' memory alive while they still map it).
  ~SharedChunks();

  bool valid() const { return device_ != nullptr; }
  // False where no handle type works and the caller allowed plain memory:
  // only this rank's own chunks are mapped; unshared_reason() says why.
  bool shared() const { return type_ != HandleType::kNone; }
  const Status& unshared_reason() const { return unshared_reason_; }
  HandleType handle_type() const { return type_; }
  int group_rank() const { return group_rank_; }
  int group_size() const { return static_cast<int>(world_ranks_.size()); }
  int world_rank_of(int group_rank) const { return world_ranks_[static_cast<size_t>(group_rank)]; }
  // Sizes stay readable after teardown(); addresses need a valid() result.
  int chunk_count(int peer) const;
  uint64_t chunk_bytes(int peer, int chunk) const;  // as mapped (granularity multiple)
  // This process's address of `peer`'s chunk (own included); a peer's only when shared().
  DevicePtr chunk(int peer, int chunk) const;
  // Start and size of `peer`'s span: its chunks lie back to back from the start.
  DevicePtr span(int peer) const;
  uint64_t span_bytes(int peer) const;

  // Collective over the group that built it: synchronize users (barrier),
  // unmap, release the imports, free the range; then a barrier so every peer
  // has unmapped before this rank releases its own chunks.
  Status teardown();

 private:
  friend Result<SharedChunks> exchange_shareable_chunks(RankBackend& backend, Collectives& group,
                                                        std::span<const uint64_t> chunk_bytes,
                                                        const ChunkExchangeOptions& options);
  void release_locally();
  bool mapped(int peer) const { return shared() || peer == group_rank_; }

  DeviceMemory* device_ = nullptr;
  Collectives* group_ = nullptr;
  int world_rank_ = -1;
  int group_rank_ = -1;
  HandleType type_ = HandleType::kPosixFd;
  Status unshared_reason_;
  std::vector<int> world_ranks_;
  std::vector<std::vector<uint64_t>> chunk_bytes_;    // per group rank
  std::vector<std::vector<uint64_t>> chunk_offsets_;  // per group rank: each chunk's offset in its span
  std::vector<DevicePtr> spans_;                    // per group rank; 0 where not mapped
  uint64_t span_bytes_per_peer_ = 0;                // 0: each span is its chunks
  std::vector<DeviceAllocation> own_;               // released last: peers map them until the final barrier
  PeerMappings mappings_;
};

// The whole exchange, collective over `group` (which must outlive the
// result): gather placement facts, fabric probes and every rank's chunk
// count and bytes; check them (a granularity that differs, a chunk that is
// not a positive multiple of it, chunks longer than the span, a count other
// than expected: invalid_argument naming the rank, the peer and the step);
// choose the handle type; create and export this rank's chunks; exchange
// (FABRIC: all-gather the 64-byte handles; POSIX: each rank sends one fd per
// chunk to every peer over backend.fds); import and map every peer's chunks
// into its span. Counts and sizes may differ between ranks. On any failure
// every rank undoes all of it: nothing mapped, reserved, imported or open.
Result<SharedChunks> exchange_shareable_chunks(RankBackend& backend, Collectives& group,
                                               std::span<const uint64_t> chunk_bytes,
                                               const ChunkExchangeOptions& options = {});

// One allocation per rank, equal on every rank: the list form with one
// chunk of `bytes_per_rank` rounded up to the granularity; member p's slot
// at base + p * stride.
class SharedMapping {
 public:
  SharedMapping() = default;
  explicit SharedMapping(SharedChunks chunks) : chunks_(std::move(chunks)) {}

  bool valid() const { return chunks_.valid(); }
  HandleType handle_type() const { return chunks_.handle_type(); }
  uint64_t bytes_per_rank() const { return chunks_.chunk_bytes(chunks_.group_rank(), 0); }  // granularity-rounded
  int group_rank() const { return chunks_.group_rank(); }
  int group_size() const { return chunks_.group_size(); }
  int world_rank_of(int group_rank) const { return chunks_.world_rank_of(group_rank); }
  // This process's address of group rank `peer`'s allocation (own included).
  DevicePtr peer(int peer) const { return chunks_.chunk(peer, 0); }
  DevicePtr local() const { return peer(group_rank()); }
  std::vector<DevicePtr> peer_pointers() const;

  // Collective: see SharedChunks::teardown.
  Status teardown() { return chunks_.teardown(); }

 private:
  SharedChunks chunks_;
};

// The single-allocation form: `bytes_per_rank` rounded up to the
// granularity, equal on every rank (else invalid_argument naming the rank).
Result<SharedMapping> exchange_shareable_handles(RankBackend& backend, Collectives& group, uint64_t bytes_per_rank);

// The handle type this device alone would export as, the way SGLang picks
// its default: FABRIC when a real FABRIC create + export works, else POSIX
// fds when the device supports them, else kNone (plain memory). The group's
// choice also weighs hosts and domains (core/exchange/handle_type_plan.h).
Result<HandleType> default_handle_type(DeviceMemory& device);

}  // namespace engram
