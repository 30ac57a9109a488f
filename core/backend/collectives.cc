#include "core/backend/collectives.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/base/bf16.h"

namespace engram {

Result<std::shared_ptr<const GatheredBytes>> Collectives::all_gather_shared(std::span<const std::byte> mine) {
  auto all = std::make_shared<GatheredBytes>();
  all->bytes.resize(mine.size() * static_cast<size_t>(size()));
  ENGRAM_RETURN_IF_ERROR(all_gather(mine, all->bytes));
  return std::shared_ptr<const GatheredBytes>(std::move(all));
}

Status reduce_scatter_max_bytes(Collectives& group, std::span<const std::byte> input, std::span<std::byte> output) {
  const size_t n = static_cast<size_t>(group.size());
  if (input.size() != output.size() * n)
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("reduce_scatter (max): input holds {} bytes, expected {} x {}", input.size(), n,
                              output.size()),
                  {group.world_rank(), -1, "reduce_scatter"});
  std::vector<std::byte> chunks(input.size());
  ENGRAM_RETURN_IF_ERROR(group.all_to_all(input, chunks));
  std::fill(output.begin(), output.end(), std::byte{0});
  for (size_t i = 0; i < chunks.size(); ++i) output[i % output.size()] = std::max(output[i % output.size()], chunks[i]);
  return Status::ok();
}

void reduce_scatter_sum_bf16_reference(std::span<const std::span<const uint16_t>> inputs_by_rank,
                                       int receiving_rank, std::span<uint16_t> output) {
  const int size = static_cast<int>(inputs_by_rank.size());
  ENGRAM_CHECK(receiving_rank >= 0 && receiving_rank < size);
  const size_t chunk = output.size();
  for (const auto& in : inputs_by_rank) ENGRAM_CHECK(in.size() == chunk * static_cast<size_t>(size));
  const size_t base = chunk * static_cast<size_t>(receiving_rank);
  for (size_t i = 0; i < chunk; ++i) {
    // The ring starts at the receiver's successor and ends at the receiver.
    int first = (receiving_rank + 1) % size;
    uint16_t acc = inputs_by_rank[static_cast<size_t>(first)][base + i];
    for (int step = 1; step < size; ++step) {
      int r = (first + step) % size;
      acc = float_to_bf16(bf16_to_float(acc) + bf16_to_float(inputs_by_rank[static_cast<size_t>(r)][base + i]));
    }
    output[i] = acc;
  }
}


}  // namespace engram
