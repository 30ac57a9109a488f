// Where a host's ranks run: the fixes for a small /dev/shm or for replicas
// that look like separate nodes differ between Docker, Kubernetes and a bare
// host, so messages name the one that applies (all three when unknown).
#pragma once

#include <string_view>

#include "core/base/status.h"
#include "core/base/units.h"

namespace engram {

enum class RuntimeEnvironment : uint8_t { kUnknown, kBareMetal, kDocker, kKubernetes };

// "unknown", "bare_metal", "docker", "kubernetes"
const char* runtime_environment_name(RuntimeEnvironment environment);
// The names above; anything else is invalid_argument naming `field`.
Result<RuntimeEnvironment> parse_runtime_environment(std::string_view text, std::string_view field);

// How a host's memory limits (memory_limit, memory_limit_per_rank and their
// flags) read K/M/G/T/P alone: as its pod spec does on Kubernetes (powers of
// 1000, docs/reference.md "Sizes"), as Docker, systemd and our own fields do
// elsewhere (powers of 1024). shm_size_limit is a Kubernetes quantity always.
inline SizeUnits memory_limit_units(RuntimeEnvironment environment) {
  return environment == RuntimeEnvironment::kKubernetes ? SizeUnits::kKubernetes : SizeUnits::kBinaryLetters;
}

}  // namespace engram
