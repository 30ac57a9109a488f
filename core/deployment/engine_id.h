// Which inference engine's rules a deployment is planned by (--engine,
// `engine: {name: ...}`). Plain data, so core/deployment can hold it; the
// rules themselves are the engine profiles (core/engines/engine_profile.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace engram {

// The registered engines, in the registration table's order.
enum class EngineId : uint8_t {
  kEngramlab,  // today's rules: SGLang's device layout, vLLM's host layouts
  kVllm,
  kSglang,
};
// A new engine is an enumerator added last, this count, its profile file and
// one case in core/engines/engine_registry.cc (-Werror=switch fails a missing
// case; the registry checks each entry's id at first use).
inline constexpr size_t kEngineCount = 3;
static_assert(static_cast<size_t>(EngineId::kSglang) + 1 == kEngineCount,
              "kEngineCount is the last EngineId plus one: add a new engine last and count it");

}  // namespace engram
