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
inline constexpr size_t kEngineCount = 3;  // the registry static_asserts it matches its entries

}  // namespace engram
