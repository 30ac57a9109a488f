// Placement facts from every rank of a group, before anyone decides: each
// rank's PlacementFacts (hostname, boot id and NVLink domain of any length,
// IMEX channel, GPU ordinal, visible GPUs) plus a fixed-size part of the
// caller's own (the handle exchange's sizes and probe, the runtime's tmpfs
// total and GPU memory), which must have the same size on every rank.
//
// One all_gather of kFactsRecordBytes-byte records when every rank's record
// fits (the usual case); otherwise a second round padded to the longest
// record, whose length every rank knows from the first round's headers.
// O(group size) per rank; ranks that received one shared buffer (the
// emulator's) share one scan of it and one decoded copy, kept with the
// buffer (GatheredBytes::derived), so N ranks cost O(N).
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/backend/collectives.h"
#include "core/backend/host_probe.h"
#include "core/base/derived_once.h"
#include "core/base/status.h"

namespace engram {

inline constexpr size_t kFactsRecordBytes = 256;

struct RankFacts {
  PlacementFacts placement;
  std::vector<std::byte> extra;  // the caller's fixed part, as that rank sent it

  template <typename T>
  T extra_as() const {
    static_assert(std::is_trivially_copyable_v<T>);
    ENGRAM_CHECK(extra.size() == sizeof(T));
    T value;
    std::memcpy(&value, extra.data(), sizeof(T));
    return value;
  }
};

struct GatheredFacts {
  std::vector<RankFacts> ranks;  // in group-rank order
  bool took_second_round = false;
  // What the ranks that share these facts derive from them, once (the
  // runtime's plan: core/runtime/shared_plan.cc). Facts are shared only
  // by the ranks that were handed one gathered buffer (GatheredBytes), so
  // the memo is theirs alone and ends with the facts.
  DerivedOnce derived;
};

// Errors: the all_gather's own, without context (callers add rank and step).
Result<std::shared_ptr<const GatheredFacts>> gather_facts(Collectives& group, const PlacementFacts& mine,
                                                          std::span<const std::byte> extra);

template <typename T>
Result<std::shared_ptr<const GatheredFacts>> gather_facts(Collectives& group, const PlacementFacts& mine,
                                                          const T& extra) {
  static_assert(std::is_trivially_copyable_v<T>);
  return gather_facts(group, mine, std::as_bytes(std::span<const T>(&extra, 1)));
}

}  // namespace engram
