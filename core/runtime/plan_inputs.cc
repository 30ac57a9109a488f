#include "core/runtime/plan_inputs.h"

#include <cstdint>
#include <functional>
#include <optional>

#include "core/runtime/engram_runtime.h"

namespace engram {
namespace {

// boost::hash_combine's mix, 64-bit.
size_t mix(size_t seed, size_t value) {
  return seed ^ (value + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2));
}

template <class... T>
size_t combine(const T&... values) {
  size_t h = 0;
  ((h = mix(h, std::hash<T>{}(values))), ...);
  return h;
}

size_t hash_of(const ParallelLayout& layout) {
  const auto& [tp, dp, ep, elastic_ep, prefill_cp, extra_ranks] = layout;
  return combine(tp, dp, ep, elastic_ep, prefill_cp, extra_ranks);
}

size_t hash_of(const EngramConfig& config) {
  const auto& [cpu_offload, peer_shards, dp_shared_memory, shard_group, tokens_per_rank_max, sequence_parallel,
               placement, cpu_offload_given, embedding_across_dp, thp_packing, host_layout] = config;
  return combine(cpu_offload, peer_shards, dp_shared_memory, shard_group, tokens_per_rank_max, sequence_parallel,
                 placement, cpu_offload_given, embedding_across_dp, thp_packing, host_layout);
}

size_t hash_of(const EngineMemory& engine) {
  const auto& [gpu_memory_fraction, gpu_reserved_bytes, reserved_from_model, fraction_given, context_length_tokens,
               negative_kv_allowed, profile, variant] = engine;
  return combine(gpu_memory_fraction, gpu_reserved_bytes, reserved_from_model, fraction_given, context_length_tokens,
                 negative_kv_allowed, profile, variant);
}

}  // namespace

PlanInputs PlanInputs::of(const RuntimeOptions& options) {
  return {options.placement_model, options.layout, options.config, options.engine};
}

size_t PlanInputsHash::operator()(const PlanInputs& inputs) const noexcept {
  const auto& [placement_model, layout, config, engine] = inputs;
  return combine(placement_model, hash_of(layout), hash_of(config), hash_of(engine));
}

}  // namespace engram
