#include "core/backend/shm_fill_limits.h"

#include <fmt/format.h>

#include "core/base/units.h"

namespace engram {

Status memory_cgroup_refusal(const std::string& table_path, uint64_t bytes, const std::string& cgroup,
                             uint64_t limit_bytes, uint64_t usage_bytes) {
  return Status(ErrorCode::kResourceExhausted,
                fmt::format("filling {} ({}) would exceed the writer's memory cgroup: shared-memory pages "
                            "are charged to the memory cgroup of the process that writes them, and {} allows {} "
                            "with {} in use, so the kernel would OOM-kill the writer mid-fill (while df /dev/shm "
                            "still shows the space free); raise the writer's memory limit by the table size "
                            "(docker --memory, Kubernetes resources.limits.memory) or use a placement without a "
                            "host copy (cpu_offload: false); the segment was removed",
                            table_path, format_bytes(bytes), cgroup, format_bytes(limit_bytes),
                            format_bytes(usage_bytes)),
                {.step = "shm_write"});
}

Status tmpfs_enforced_limit_refusal(const std::string& segment, uint64_t bytes, const std::string& host,
                                    uint64_t total_bytes, uint64_t enforced_bytes, uint64_t used_bytes) {
  return Status(ErrorCode::kResourceExhausted,
                fmt::format("filling /dev/shm/{} ({}) on host {} would exceed the limit its tmpfs enforces: "
                            "statvfs shows {} in total, but only {} may be used ({} in use), as with a Kubernetes "
                            "emptyDir sizeLimit, whose pod is evicted past it; set the emptyDir sizeLimit (and the "
                            "pod's memory limit) to at least the table size; the segment was removed",
                            segment, format_bytes(bytes), host, format_bytes(total_bytes),
                            format_bytes(enforced_bytes), format_bytes(used_bytes)),
                {.step = "shm_write"});
}

Status host_ram_refusal(const std::string& segment, uint64_t bytes, const std::string& host, uint64_t ram_bytes,
                        uint64_t used_bytes) {
  return Status(ErrorCode::kResourceExhausted,
                fmt::format("filling /dev/shm/{} ({}) on host {} would exceed its RAM: tmpfs pages live in RAM, "
                            "and the host has {} with {} already in tmpfs; the tmpfs total may be larger than the "
                            "RAM behind it; use a host with more memory or a placement without a host copy "
                            "(cpu_offload: false); the segment was removed",
                            segment, format_bytes(bytes), host, format_bytes(ram_bytes), format_bytes(used_bytes)),
                {.step = "shm_write"});
}

}  // namespace engram
