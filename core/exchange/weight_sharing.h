// A weight-sharing transport: each rank of a group shares a list of named
// tensors (counts and sizes may differ between ranks) and reads every
// peer's, one exported chunk per tensor, each rounded up to the granularity
// so every peer range is page-aligned (as SGLang's expert-weight transport
// exchanges one handle per (layer, weight)). The second consumer of the
// list-form handle exchange (handle_exchange.h), after the peer-shard table.
//
// Where no handle type works and the caller allows it, every rank gets plain
// memory for its own tensors and a read of a peer's tensor answers
// failed_precondition with the reason the plan gave.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/exchange/handle_exchange.h"

namespace engram {

struct TensorSpec {
  std::string name;    // unique within its rank's list
  uint64_t bytes = 0;  // as the tensor needs; the chunk is rounded up to the granularity
};

struct WeightSharingOptions {
  bool allow_unshared = false;  // see ChunkExchangeOptions::allow_unshared
};

class WeightSharing {
 public:
  // Collective over `group` (which must outlive the result): gathers every
  // rank's tensor names and sizes, checks them (a rank with no tensors, an
  // empty or repeated name, a 0-byte tensor: invalid_argument naming the rank
  // and tensor), then exchanges one chunk per tensor, each peer expected to
  // announce as many chunks as it listed tensors.
  static Result<WeightSharing> create(RankBackend& backend, Collectives& group, std::span<const TensorSpec> mine,
                                      WeightSharingOptions options = {});

  bool shared() const { return chunks_.shared(); }
  const Status& unshared_reason() const { return chunks_.unshared_reason(); }
  HandleType handle_type() const { return chunks_.handle_type(); }
  int group_rank() const { return chunks_.group_rank(); }
  int group_size() const { return chunks_.group_size(); }
  // Group rank `owner`'s tensors, in the order it listed them.
  std::span<const TensorSpec> tensors_of(int owner) const { return tensors_[static_cast<size_t>(owner)]; }

  // This process's address of `owner`'s tensor `name`: not_found naming
  // both, failed_precondition when unshared and `owner` is a peer.
  Result<DevicePtr> address(int owner, std::string_view name) const;
  // Writes this rank's own tensor (whole or a prefix); reads any owner's.
  Status write(std::string_view name, std::span<const std::byte> bytes);
  Status read(int owner, std::string_view name, std::span<std::byte> bytes) const;

  // Collective: see SharedChunks::teardown.
  Status teardown() { return chunks_.teardown(); }

 private:
  WeightSharing(RankBackend& backend, std::vector<std::vector<TensorSpec>> tensors, SharedChunks chunks)
      : backend_(&backend), tensors_(std::move(tensors)), chunks_(std::move(chunks)) {}
  // Index of `name` in owner's list, or a status naming both.
  Result<int> find(int owner, std::string_view name, const char* step) const;

  RankBackend* backend_;
  std::vector<std::vector<TensorSpec>> tensors_;  // per group rank
  SharedChunks chunks_;
};

}  // namespace engram
