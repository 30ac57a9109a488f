// The memory verdict with its margin: for every limit a deployment's host
// memory is held against (a host's RAM, its /dev/shm and a sizeLimit below
// it, a container's or pod's memory limit), the limit, what the plan charges
// to it and the headroom left, against a stated floor; and what the plan
// does not count. `plan` prints them (text and JSON), warns below the floor
// and sizes its fixes as charge + floor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/warnings.h"
#include "core/plan/deployment_plan.h"
#include "core/plan/shm_fix.h"

namespace engram {

// What the plan leaves to the engine's processes under a host memory limit
// or in RAM, per rank: a worker's own resident memory (Python, torch, the
// CUDA context, NCCL's host buffers) is several GiB, none of it counted.
inline constexpr uint64_t kHostHeadroomFloorBytesPerRank = 8ull << 30;
// What the plan leaves in a node's /dev/shm beside the tables: NCCL's
// shared-memory transport and the engine's own segments live there too, and
// are not counted. The /dev/shm fixes propose the tables plus this.
inline constexpr uint64_t kShmHeadroomFloorBytesPerNode = kShmFixHeadroomBytes;

struct MemoryMargin {
  std::string limit;    // "memory_limit (pod)", "memory_limit_per_rank", "RAM", "/dev/shm", "shm_size_limit"
  std::string scope;    // "host gb300-0, ranks 0-3"
  uint64_t limit_bytes = 0;
  uint64_t charged_bytes = 0;
  std::string charged;  // "host_shared /dev/shm copy 188.8 GiB + pinned staging 64.0 MiB"
  int64_t headroom_bytes = 0;  // limit - charged; negative: over (the fit refuses it)
  uint64_t floor_bytes = 0;    // the headroom below which plan warns
  int ranks = 0;
};

// One row per limit and host (alike rows are not merged: a row names its host).
std::vector<MemoryMargin> memory_margins(const PlanResult& plan);

// What the plan does not count, in words (the engine's processes, the
// model's weights where its file has no serving figures, NCCL's /dev/shm).
// An engine profile's own extras (what it holds beside the tables) join
// this list where the profile states them.
std::vector<std::string> memory_not_counted(const PlanResult& plan);

// Key "memory.headroom_low": limits met with less than their floor left (the
// ones exceeded are the fit's errors); key "plan.context_length_unused":
// --context-length given where the model has no KV figures. Appended to
// plan.warnings unless their key is there.
void add_memory_margin_warnings(PlanResult& plan);

}  // namespace engram
