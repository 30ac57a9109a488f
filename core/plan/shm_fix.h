// The fixes messages offer when a node's shared host table cannot work: a
// /dev/shm too small or missing, or replicas that look like separate nodes.
// Each names the fix for the environments its hosts run in (Docker,
// Kubernetes, a bare host; all three where one is unknown) and the opt-out,
// dp_shared_memory: false. Sizes are whole GiB rounded up, as each tool
// reads them.
#pragma once

#include <cstdint>
#include <string>

#include "core/deployment/runtime_environment.h"

namespace engram {

// A set of runtime environments: the hosts a message names run in these.
class EnvironmentSet {
 public:
  EnvironmentSet() = default;
  EnvironmentSet(RuntimeEnvironment one) { add(one); }  // NOLINT: one environment is a set of one
  void add(RuntimeEnvironment e) { bits_ |= static_cast<uint8_t>(1u << static_cast<unsigned>(e)); }
  // Whether the fixes for `which` apply: it is in the set, or the set is
  // empty or holds kUnknown (every fix is named then).
  bool applies(RuntimeEnvironment which) const;

 private:
  uint8_t bits_ = 0;
};

// The headroom a /dev/shm fix adds to the tables it must hold: NCCL's
// shared-memory transport and the engine's own segments share the node's
// /dev/shm and are not counted (core/plan/memory_margins.h).
// NCCL's shared-memory segments are megabytes a rank pair, so 1 GiB covers
// a node of eight ranks with room to spare.
inline constexpr uint64_t kShmFixHeadroomBytes = 1ull << 30;

// "Docker: --shm-size=193g (or --ipc=host ...); Kubernetes: ...; bare metal:
// ...; or set dp_shared_memory: false ..." for a tmpfs that must hold
// `table_bytes_total`, sized as the tables plus kShmFixHeadroomBytes.
std::string shm_fix_text(uint64_t table_bytes_total, EnvironmentSet environments);

// How to make a node's replicas one node-local group.
std::string colocation_fix_text(EnvironmentSet environments);

}  // namespace engram
