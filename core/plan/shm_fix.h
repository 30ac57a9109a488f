// The fixes messages offer when a node's shared host table cannot work: a
// /dev/shm too small or missing, or replicas that look like separate nodes.
// Each names the fix for the environment that applies (Docker, Kubernetes,
// a bare host; all three when unknown) and the opt-out, dp_shared_memory:
// false. Sizes are whole GiB rounded up, as each tool reads them.
#pragma once

#include <cstdint>
#include <string>

#include "core/deployment/runtime_environment.h"

namespace engram {

// "Docker: --shm-size=189g (or --ipc=host ...); Kubernetes: ...; bare metal:
// ...; or set dp_shared_memory: false ..." for a tmpfs that must hold
// `table_bytes_total`.
std::string shm_fix_text(uint64_t table_bytes_total, RuntimeEnvironment environment);

// How to make a node's replicas one node-local group.
std::string colocation_fix_text(RuntimeEnvironment environment);

}  // namespace engram
