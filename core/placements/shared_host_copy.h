// What SGLang's whole-table host layouts share (sglang_shared: one memfd
// copy per node; sglang_numa_shared: one per NUMA node of the GPUs;
// sglang_file: a table file's page cache per node): a group of ranks of one
// host holds one whole copy of every table that its lowest rank creates and
// fills; the others map it read-only. Each rank looks up its own tokens on
// the CPU with no collective (every TP rank holds every head); nothing is
// registered with the device (unpinned).
//
// kMemfd: the others open the writer's memfd through /proc/<pid>/fd/<n>
// (core/backend/process_shared_memory.h), which needs the group in one PID
// namespace: checked first, on every member alike. kFile: they open the
// table file by name; the writer removes the names once every member has
// mapped, so a killed job leaves nothing behind.
#pragma once

#include <memory>

#include "core/backend/collectives.h"
#include "core/placements/placement.h"

namespace engram {

enum class HostCopyBacking : uint8_t { kMemfd, kFile };

// `copy_group`: the ranks sharing the copy, all of one host (collective over
// it); `owned_copy_group`, where given, is copy_group and lives as long as
// the tables. Errors name `placement`; ranks in other PID namespaces than
// a memfd's writer fail alike on every member (failed_precondition naming
// the ranks, both namespaces and the fix).
Result<std::unique_ptr<PlacementTables>> build_shared_host_copy(PlacementContext& context, Collectives& copy_group,
                                                                std::unique_ptr<Collectives> owned_copy_group,
                                                                HostCopyBacking backing, const char* placement);

// A placement's lookup over a whole table every TP rank holds, named for errors.
Status lookup_host_copy(Collectives& tp_group, const LookupRequest& request, std::span<const std::byte> table_bytes,
                        const char* placement);

}  // namespace engram
