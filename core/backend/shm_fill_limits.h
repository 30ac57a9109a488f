// Limits a /dev/shm fill meets after the placement is decided. The placement
// reads only the tmpfs total (the same on every rank of a node); these are
// what a container does to the pages once a writer touches them:
//   - a memory cgroup: tmpfs pages are charged to the cgroup of the process
//     that writes them, so a writer whose limit is below the table is
//     OOM-killed mid-fill while `df /dev/shm` still shows the space free;
//   - a tmpfs that enforces less than its statvfs total (a Kubernetes
//     emptyDir with a sizeLimit: the pod is evicted past it);
//   - the host's RAM, which holds every tmpfs page.
// The real backend (backends/shm) and the emulator check them before the
// pages are touched and refuse with these messages, so both say the same.
#pragma once

#include <cstdint>
#include <string>

#include "core/base/status.h"

namespace engram {

// resource_exhausted (step "shm_write") naming the table ("/dev/shm/<name>",
// "memfd <name>"), the memory cgroup, its limit and usage, and the fix.
Status memory_cgroup_refusal(const std::string& table_path, uint64_t bytes, const std::string& cgroup,
                             uint64_t limit_bytes, uint64_t usage_bytes);
// resource_exhausted naming the enforced limit the statvfs total hides.
Status tmpfs_enforced_limit_refusal(const std::string& segment, uint64_t bytes, const std::string& host,
                                    uint64_t total_bytes, uint64_t enforced_bytes, uint64_t used_bytes);
// resource_exhausted naming the host's RAM.
Status host_ram_refusal(const std::string& segment, uint64_t bytes, const std::string& host, uint64_t ram_bytes,
                        uint64_t used_bytes);

}  // namespace engram
