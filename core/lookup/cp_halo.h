// Context-parallel prefill (layout.prefill_cp, core/deployment/cp_groups.h):
// a sequence's prefill chunk is cut into one shard per CP rank, in CP rank
// order, at any offsets (a shard may be empty). An n-gram at a shard's first
// tokens reads the n-1 ids before it, which belong to earlier CP ranks (to
// several when their shards are shorter than n-1) or to the ids before the
// chunk. Each CP rank therefore trades its halo, the last n-1 ids of its
// shard, over the group's collectives (one all-gather: SGLang all-gathers ids
// over its attention CP group), and hashes its own shard after the lookback
// the halos give it, then looks up its own tokens (docs/design.md section 10).
//
// A halo that never arrives (a CP rank dead, hung, or later than the
// collectives' deadline: sim/sim_timeouts.h, TcpCollectivesOptions::op_timeout,
// NCCL's watchdog) fails the exchange with deadline_exceeded naming the CP
// rank and the world rank that did not send, with step "cp_halo".
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/backend/collectives.h"
#include "core/backend/device_compute.h"
#include "core/base/status.h"
#include "core/model/hashing.h"

namespace engram {

// The group's halos after an exchange: per CP rank its shard's length and
// its last min(length, halo_length) ids.
class CpHalo {
 public:
  int member_count() const { return static_cast<int>(shard_tokens_.size()); }
  int halo_length() const { return halo_length_; }
  int64_t shard_tokens(int cp_rank) const;
  // Where CP rank k's shard starts in the chunk: the earlier shards' lengths.
  int64_t shard_offset(int cp_rank) const;
  int64_t chunk_tokens() const;
  // The ids before CP rank k's first token, oldest first: the last
  // halo_length ids of preceding_ids (the ids before the chunk: a cached
  // prefix, earlier chunks; only their tail matters) followed by shards
  // 0..k-1. What RequestHasher::begin takes as preceding ids.
  std::vector<int64_t> lookback_before(int cp_rank, std::span<const int64_t> preceding_ids) const;
  // The same after the whole chunk (every shard): where the request goes on.
  std::vector<int64_t> lookback_after_chunk(std::span<const int64_t> preceding_ids) const;

  // From the gathered frames (every member's encode_cp_halo_frame, in CP
  // rank order); internal error naming the member whose frame is malformed.
  static Result<CpHalo> decode(std::span<const int64_t> gathered, int halo_length,
                               std::span<const int> member_world_ranks, int world_rank);

 private:
  int halo_length_ = 0;
  std::vector<int64_t> shard_tokens_;            // by CP rank
  std::vector<std::vector<int64_t>> tails_;      // by CP rank, oldest first
};

// One member's frame: halo_length, its shard's length, then halo_length ids
// (its tail, DEAD-padded). int64 words.
int cp_halo_frame_words(int halo_length);
std::vector<int64_t> encode_cp_halo_frame(int halo_length, std::span<const int64_t> shard);

// The lookback an n-gram needs, over every table of a model: the longest
// history any of them reads (max order - 1).
int cp_halo_length(std::span<const TableHasher> hashers);

// Collective over `group` (the CP group, members in CP rank order, each
// member's world rank in member_world_ranks): every member calls it with its
// shard and the same halo_length.
Result<CpHalo> exchange_cp_halo(Collectives& group, std::span<const int> member_world_ranks, int halo_length,
                                std::span<const int64_t> shard);

// The same exchange on device memory (DeviceCollectives::all_gather: NCCL on
// a GPU, the emulator's device collectives): its two buffers are made once,
// at create(), so an exchange allocates nothing; the gathered halos are
// read back to the host, where the shard is hashed.
class DeviceCpHaloExchange {
 public:
  static Result<DeviceCpHaloExchange> create(DeviceCompute& compute, DeviceCollectives& group,
                                             std::vector<int> member_world_ranks, int world_rank, int halo_length);
  DeviceCpHaloExchange(DeviceCpHaloExchange&& other) noexcept;
  DeviceCpHaloExchange& operator=(DeviceCpHaloExchange&&) = delete;
  DeviceCpHaloExchange(const DeviceCpHaloExchange&) = delete;
  ~DeviceCpHaloExchange();

  // Collective: every member calls it, on its stream (synchronised before
  // the halos are read back).
  Result<CpHalo> exchange(std::span<const int64_t> shard, StreamRef stream);
  // Frees the buffers; the first failure. Ok when already closed.
  Status close();

 private:
  DeviceCpHaloExchange() = default;

  DeviceCompute* compute_ = nullptr;
  DeviceCollectives* group_ = nullptr;
  std::vector<int> member_world_ranks_;
  int world_rank_ = -1;
  int halo_length_ = 0;
  DevicePtr mine_ = 0;      // int64 [frame words]
  DevicePtr gathered_ = 0;  // int64 [members][frame words]
};

// One CP rank's ids of one table: its shard hashed after lookback_before
// (tokens checked first; row_ids: shard.size() x heads). The shard must be
// the one this rank exchanged (its length is checked against the halo).
Status hash_cp_shard(const CpHalo& halo, int cp_rank, const TableHasher& hasher,
                     std::span<const int64_t> preceding_ids, std::span<const int64_t> shard,
                     std::span<int64_t> row_ids);

}  // namespace engram
