#include "harness/scenario_rank_lookup.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/base/bf16.h"
#include "core/base/coverage_probe.h"

namespace engram::harness {
namespace {

std::string first_difference(std::span<const uint16_t> want, std::span<const uint16_t> got, int dim) {
  for (size_t i = 0; i < want.size(); ++i)
    if (!bf16_same(want[i], got[i]))
      return fmt::format("value {} (row entry {}, element {}): direct 0x{:04x}, placement 0x{:04x}", i,
                         i / static_cast<size_t>(dim), i % static_cast<size_t>(dim), want[i], got[i]);
  return {};
}

}  // namespace

RankLookups::RankLookups(EngramRuntime& runtime, const ScenarioRankInputs& inputs, int world_rank,
                         ScenarioRankResult& out, StepClock* clock)
    : runtime_(runtime), inputs_(inputs), out_(out), clock_(clock) {
  const ParallelLayout& layout = inputs.options.layout;
  tp_rank_ = world_rank % layout.tp;
  sequence_parallel_ = inputs.options.config.sequence_parallel && layout.tp > 1;
}

Status RankLookups::lookup(int t, std::span<const int64_t> ids, int64_t slot, std::string_view label) {
  const TableSpec& table = inputs_.options.table_model.tables[static_cast<size_t>(t)];
  const ParallelLayout& layout = inputs_.options.layout;
  const size_t heads = static_cast<size_t>(table.head_count());
  const size_t token_values = heads * static_cast<size_t>(table.dim);
  // This TP rank's token shard under sequence parallelism, zero-padded.
  const size_t token_count = ids.size() / heads;
  const size_t shard = sequence_parallel_ ? (token_count + static_cast<size_t>(layout.tp) - 1) /
                                                static_cast<size_t>(layout.tp)
                                          : token_count;
  const size_t first = sequence_parallel_ ? static_cast<size_t>(tp_rank_) * shard : 0;
  std::vector<uint16_t> got(shard * token_values, 0xdead);
  // One step of one layer: the rank's own part on the step clock, then its
  // lookup (whose collectives wait for the slowest peer).
  if (clock_ != nullptr) clock_->begin_step(static_cast<int64_t>(token_count), std::max<int64_t>(1, slot));
  const Status looked = runtime_.lookup(t, ids, std::max<int64_t>(1, slot), got);
  if (clock_ != nullptr) clock_->end_step();
  ENGRAM_RETURN_IF_ERROR(looked);
  // Where the rank's device can read a host placement's table (through its
  // registration), it does, and gives the same bytes; a device placement's
  // lookup above already went through the device.
  if (!is_device_placement(runtime_.placement()) && runtime_.device_lookup_ready()) {
    std::vector<uint16_t> on_device(got.size(), 0xbeef);
    ENGRAM_RETURN_IF_ERROR(runtime_.lookup_through_device(t, ids, std::max<int64_t>(1, slot), on_device));
    coverage_probe<"lookup: a host table read by the device">();
    if (out_.lookup_mismatch.empty()) {
      std::string diff = first_difference(got, on_device, table.dim);
      if (!diff.empty())
        out_.lookup_mismatch = fmt::format("{}, table {} (layer {}), the device's read of the host table: {}", label, t,
                                           table.layer_id, diff);
    }
  }
  out_.lookup_hashes.push_back(fnv1a64(std::as_bytes(std::span<const uint16_t>(got))));
  std::vector<uint16_t> every_token(ids.size() * static_cast<size_t>(table.dim));
  inputs_.reference(t, runtime_.table_model().tables[static_cast<size_t>(t)], ids, every_token);
  std::vector<uint16_t> want(got.size(), 0);
  for (size_t k = 0; k < shard && first + k < token_count; ++k)
    std::copy_n(every_token.begin() + static_cast<std::ptrdiff_t>((first + k) * token_values), token_values,
                want.begin() + static_cast<std::ptrdiff_t>(k * token_values));
  if (out_.lookup_mismatch.empty()) {
    std::string diff = first_difference(want, got, table.dim);
    if (!diff.empty()) out_.lookup_mismatch = fmt::format("{}, table {} (layer {}): {}", label, t, table.layer_id, diff);
  }
  return Status::ok();
}

void RankLookups::check_ids(int t, std::span<const int64_t> context, std::span<const int64_t> tokens,
                            std::span<const int64_t> ids, std::string_view label) {
  const TableHasher& hasher = (*inputs_.hashers)[static_cast<size_t>(t)];
  const size_t heads = static_cast<size_t>(hasher.head_count());
  std::vector<int64_t> sequence(context.begin(), context.end());
  sequence.insert(sequence.end(), tokens.begin(), tokens.end());
  std::vector<int64_t> whole(sequence.size() * heads);
  const Status hashed = hasher.hash(sequence, {}, whole);
  ENGRAM_CHECK_MSG(hashed.is_ok(), hashed.to_string().c_str());  // the step's ids were drawn in the vocabulary
  ENGRAM_CHECK(ids.size() == tokens.size() * heads);
  const size_t first = context.size() * heads;
  out_.ids_checked += tokens.size();
  if (!out_.ids_mismatch.empty()) return;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] != whole[first + i]) {
      out_.ids_mismatch = fmt::format("{}, table {}: token {} head {}: row id {}, the accepted sequence hashed whole "
                                      "gives {}",
                                      label, t, i / heads, i % heads, ids[i], whole[first + i]);
      return;
    }
}

}  // namespace engram::harness
