// host_shared (docs/design.md section 2): one copy of the table per node in host
// shared memory (/dev/shm), one file per TP slice (core/lookup/tp_heads.h),
// created and filled by the host's lowest rank; each rank maps its TP
// slice read-only, shared by the co-located DP replicas. No DP collective
// per step: each replica looks up only its own tokens; the TP group
// assembles the heads. Costs one table set per node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend/collectives.h"
#include "core/deployment/runtime_environment.h"
#include "core/lookup/lookup_types.h"
#include "core/placements/placement.h"

namespace engram {

// Its registration (placement_registry.cc); the hooks are in host_shared.cc.
namespace host_shared_ops {
StepTime step_time(const StepCostInput& input, const StepConstants& constants);
PlacementCost cost(const ModelSpec& model, const PlacementCostInput& input);
Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context);
void ask_plan_for(EngramConfig& config);
std::string doctor_verdict(const DoctorFacts& facts);
Status lookup_from_whole_table(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                               std::span<const std::byte> whole_table_bytes);
}  // namespace host_shared_ops
inline constexpr PlacementOps kHostSharedOps{
    .id = Placement::kHostShared, .name = "host_shared", .group = PlacementGroup::kNodeLocalGroup,
    .cost = host_shared_ops::cost,
    .host_memory_fix = "host_shared already keeps one copy per node: give hosts with more RAM",
    .build = host_shared_ops::build, .ask_plan_for = host_shared_ops::ask_plan_for,
    .steps = kCreatesHostSegments, .report_heads = report_tp_slice_heads,
    .doctor_verdict = host_shared_ops::doctor_verdict, .doctor_position = 2, .bench_pinned_copy_share_min = 0.6, .step_time = host_shared_ops::step_time,
    .lookup_from_whole_table = host_shared_ops::lookup_from_whole_table};

// ------------------------------------------------------------ capability
// Whether a node's ranks can share one /dev/shm copy: host_shared's own
// capability check, as a transport's canConnect. The plan's rules, the
// strict dp_shared_memory: true check, the fallback warning and the doctor
// all ask it. Every rank of a node reads the same facts (the node-local
// group size and the tmpfs *total*, never the free space), so a node's ranks
// judge alike with no collective.

// Why a node cannot hold the shared copy (dp_shared_memory then falls back
// to host_head_sharded, or, written true, is refused).
enum class FallbackCause : uint8_t { kGroupSizeOne, kShmMissing, kShmTooSmall };
const char* fallback_cause_name(FallbackCause cause);  // "group_size_1", "shm_missing", "shm_too_small"

// What one host offers.
struct HostShmFacts {
  std::string host_name;
  bool shm_mounted = true;
  uint64_t tmpfs_bytes_total = 0;     // the total, never the free space
  int min_node_local_group_size = 1;  // the smallest node-local group among its ranks
  RuntimeEnvironment environment = RuntimeEnvironment::kUnknown;  // picks the fixes named
};

// A host that cannot, with every cause, in FallbackCause order.
struct HostShmUnmet {
  HostShmFacts host;
  std::vector<FallbackCause> causes;
};

// Every cause on one host (none: it can hold a copy of `table_bytes_total`).
std::vector<FallbackCause> host_shared_unmet(const HostShmFacts& host, uint64_t table_bytes_total);
// Every host that cannot, by name (natural order), each with its facts (its size).
std::vector<HostShmUnmet> host_shared_fitness(std::span<const HostShmFacts> hosts, uint64_t table_bytes_total);
// One cause on one host, in a few words: "/dev/shm tmpfs total 64 MiB < tables 188.8 GiB".
std::string unmet_text(FallbackCause cause, const HostShmFacts& host, uint64_t table_bytes_total);

// The node's segment of one table: engramlab-<job_id>-<name_part>-layer<layer_id>
// (the part: core/backend/host_shared_memory.h).
std::string host_table_segment_name(const std::string& job_id, std::string_view name_part, int layer_id);
// Of one TP slice of it: that name, then -tp<tp_rank> above TP1.
std::string host_table_slice_segment_name(const std::string& job_id, std::string_view name_part, int layer_id,
                                          int tp_size, int tp_rank);

// node_slice_bytes: this TP rank's slice of the node's table (the whole
// table at TP1), e.g. a /dev/shm mapping. Collective over tp_group above TP1.
Status lookup_host_shared(Collectives& tp_group, const LookupRequest& request,
                          std::span<const std::byte> node_slice_bytes);

}  // namespace engram
