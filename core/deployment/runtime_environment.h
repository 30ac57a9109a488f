// Where a host's ranks run: the fixes for a small /dev/shm or for replicas
// that look like separate nodes differ between Docker, Kubernetes and a bare
// host, so messages name the one that applies (all three when unknown).
#pragma once

#include <string_view>

#include "core/base/status.h"

namespace engram {

enum class RuntimeEnvironment : uint8_t { kUnknown, kBareMetal, kDocker, kKubernetes };

// "unknown", "bare_metal", "docker", "kubernetes"
const char* runtime_environment_name(RuntimeEnvironment environment);
// The names above; anything else is invalid_argument naming `field`.
Result<RuntimeEnvironment> parse_runtime_environment(std::string_view text, std::string_view field);

}  // namespace engram
