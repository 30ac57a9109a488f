// A placement: where one rank's Engram rows live, what that costs, how the
// rank builds its tables and looks rows up (docs/design.md section 2). One
// interface (this file), one implementation per placement in its own file
// (device_collective.cc, device_peer.cc, host_shared.cc,
// host_head_sharded.cc, host_private.cc, device_head_sharded.cc, and SGLang's
// host layouts sglang_*.cc) and one registration table
// (placement_registry.cc), as NCCL keeps a table of transport ops with a
// capability check. The plan, the memory plan, the report, the runtime, the
// bench, the swarm, the acceptance test and the doctor ask the table; none
// of them switches over placements.
//
// Which placement a rank gets is decided by the rules in core/plan/placement_rules.h.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/backend/device_memory.h"
#include "core/backend/rank_backend.h"
#include "core/deployment/placement_id.h"  // Placement, kPlacementCount, parse_placement
#include "core/deployment/runtime_environment.h"
#include "core/base/status.h"
#include "core/lookup/device_lookup.h"
#include "core/lookup/lookup_types.h"
#include "core/model/table_spec.h"
#include "core/placements/placement_steps.h"
#include "core/placements/step_cost.h"

namespace engram {

struct EngramConfig;

// The group a placement's tables are cut over and its collectives run in.
enum class PlacementGroup : uint8_t {
  kShardGroup,      // the shard group (config shard_group: world, nvlink_domain, host, replica or engram_dp)
  kNodeLocalGroup,  // the node-local Engram DP group (docs/design.md section 3)
};

// ------------------------------------------------------------------ cost

// What one rank's cost depends on. Every field takes part in the memory
// plan's memo key, so a new input is a new field here and nothing else.
struct PlacementCostInput {
  int shard_group_size = 1;       // the row-shard group (device placements)
  int shard_index = 0;            // this rank's index in it (device_head_sharded's slices differ in size)
  int node_local_group_size = 1;  // the node-local group (host placements)
  int node_local_index = 0;
  int tokens_per_rank_max = 0;    // the DP slot
  uint64_t vmm_granularity_bytes = 0;
  int tp_size = 1;                // host placements hold TP slices (core/lookup/tp_heads.h)
  int tp_rank = 0;
  auto operator<=>(const PlacementCostInput&) const = default;
};

// Host tables a placement keeps, counted as whole table sets ("copies").
enum class TableCopyScope : uint8_t {
  kNone,            // no host table
  kReplica,         // one per DP replica (its TP ranks hold slices)
  kNodeLocalGroup,  // one per node-local set of replicas (the Engram DP groups of its TP ranks hold parts)
  kHost,            // one per host, shared by its ranks
  kNumaNode,        // one per NUMA node of a host that holds ranks' GPUs, shared by that node's ranks
  kShardGroup,      // one per row-shard group (its members hold row shards), counted where shard 0 is
};

struct PlacementCost {
  uint64_t hbm_table_bytes = 0;           // device shards, granularity-rounded
  uint64_t hbm_buffer_bytes = 0;          // device lookup buffers
  uint64_t host_private_bytes = 0;        // host memory this rank allocates itself
  uint64_t host_shared_mapped_bytes = 0;  // a host-wide copy this rank maps (not extra memory)
  TableCopyScope table_copy = TableCopyScope::kNone;
  uint64_t host_shm_bytes = 0;  // /dev/shm its copy takes, counted once with the copy (kHost: once per host)
  // A shared copy outside /dev/shm (a memfd, a file's page cache), counted
  // once with the copy like host_shm_bytes and charged to its writer, but
  // not bounded by the tmpfs.
  uint64_t host_shared_copy_bytes = 0;
  // Pinned host memory its device lookup may stage ids and rows in (host
  // placements: core/placements/host_rows_on_device.h); charged to the rank's
  // memory limit with its tables.
  uint64_t host_pinned_bytes = 0;
};

// ------------------------------------------------------------------ tables

// What building one rank's tables gets.
struct PlacementContext {
  RankBackend& backend;
  Collectives& group;       // the placement's group (PlacementOps::group)
  Collectives& tp_group;    // this rank's replica, by TP rank: host placements hold TP slices
  Collectives& host_group;  // every rank of this host, by world rank
  int host_writer_world_rank = -1;  // the host's lowest world rank: creates and unlinks host-wide files
  const ModelSpec& model;   // the tables really built (tests use small ones of the same structure)
  uint64_t fill_seed = 1;   // core/model/table_fill.h: identical bytes on every rank
  std::string job_id;       // names host-wide files: engramlab-<job_id>-<part>-layer<id>
  // The part of those names no other user can guess (core/backend/host_shared_memory.h).
  std::string shm_name_part = std::string(kFixedShmNamePart);
  uint64_t host_fill_chunk_bytes = 1ull << 30;  // a /dev/shm fill agrees after each chunk
  // Device lookups (backend.compute set): their buffers are made at build
  // time for lookups of up to this many tokens per rank.
  int64_t tokens_per_rank_max = 1024;
  // device_peer also builds the collective over its shards, so a check can
  // compare the two paths on the same rows (one V4.1 table set fits a GPU,
  // two do not).
  bool collective_cross_check = false;
  // Some ranks of the deployment share a GPU (hosts[].ranks_per_gpu): no
  // NCCL communicator is set up (device_peer skips its cross-check, host
  // placements their collective device lookup). The same on every rank.
  bool ranks_share_gpus = false;
  bool is_host_writer() const { return host_group.world_rank() == host_writer_world_rank; }
};

// What one rank's built tables hold.
struct PlacementFootprint {
  uint64_t device_bytes = 0;       // VMM allocations
  uint64_t host_bytes = 0;         // private host memory (shared segments not counted)
  uint64_t shared_host_bytes = 0;  // /dev/shm segments this rank created (its node's copy)
  std::optional<HandleType> handle_type;  // the handle type its group agreed on, where it shares device memory
  // Host tables: this rank's time filling rows (the node's writer, or each
  // rank its private copy; for a /dev/shm table, reserving its pages
  // first included) and registering them with its device; 0 where it did
  // neither. Printed by acceptance (a V4.1 layer's host table is
  // filled and registered within 30 s on one H200 host: docs/perf_notes.md).
  double host_fill_seconds = 0;
  double device_register_seconds = 0;
};

// One rank's tables of one placement, from build to release.
class PlacementTables {
 public:
  // Local clean-up only: what this rank holds; no collective (a peer may be gone).
  virtual ~PlacementTables() = default;

  const PlacementFootprint& footprint() const { return footprint_; }

  // The host lookup of table `table_index` (core/lookup/lookup_types.h: the
  // request and the rules every placement shares). Collective over the
  // placement's group where the placement's lookup is (collective_lookup).
  virtual Status lookup(int table_index, const LookupRequest& request) = 0;

  // The device lookup (core/lookup/device_lookup.h): ids and output in
  // device memory, enqueued on request.stream, nothing allocated or
  // synchronised inside. Collective over the placement's group where its
  // lookup is. Needs the rank's DeviceCompute (backend.compute); each
  // placement's device resources (shard tables, registered host tables,
  // communicators, buffers) are members of its tables, made in its build
  // and given back in release() and the destructor like everything here.
  virtual Status lookup_device(int table_index, const DeviceLookupRequest& request) = 0;

  // device_peer built with collective_cross_check: the same lookup through
  // the collective over the same shards. Others: failed_precondition.
  virtual Status lookup_device_collective(int table_index, const DeviceLookupRequest& request);
  // Whether lookup_device_collective can run (device_peer built with the
  // cross-check, on ranks that do not share a GPU).
  virtual bool collective_cross_check_built() const { return false; }

  // Whether lookup_device can run on these tables (built with a
  // DeviceCompute, and a device lookup this placement has for its layout);
  // where not, lookup_device answers failed_precondition saying why.
  virtual bool device_lookup_ready() const = 0;

  // Collective over the placement's group: gives back everything this rank
  // holds. Returns the first failure and carries on past it.
  virtual Status release() = 0;
  // After every rank of the host has released (the runtime's host barrier,
  // ok or not): host-wide leftovers, e.g. the node's /dev/shm files.
  virtual Status after_host_released(bool host_barrier_ok) { return Status::ok(); }

 protected:
  PlacementFootprint footprint_;
};

// ------------------------------------------------------------------ tools

// The one-process kernel the bench holds a placement's runtime lookup
// against. The bench's ratio columns and targets come in this order.
enum class BenchReference : uint8_t {
  kNone,        // none: a host placement's ceiling is the pinned copy
  kPeerKernel,  // the gather over peer-mapped shards
  kNcclPath,    // the all-gather, gather, reduce-scatter path
};

// What the doctor found on this machine, as the placements' verdicts read it
// (apps/doctor_command.cc gathers it).
struct DoctorFacts {
  bool have_gpus = false;
  bool all_vmm = false;         // every GPU supports VMM
  bool all_fabric = false;      // FABRIC handles work on every GPU (probe, IMEX channel, one NVLink domain)
  bool all_posix_fd = false;    // every GPU exports POSIX fds
  std::string fabric_why;       // why FABRIC does not work, where it does not
  std::string nvlink_domain;    // the first GPU's
  bool p2p_all = false;         // every GPU pair has P2P access
  bool shm_mounted = false;
  uint64_t shm_total_bytes = 0;
  uint64_t shm_free_bytes = 0;
  std::string hostname;
  RuntimeEnvironment environment = RuntimeEnvironment::kUnknown;
  int node_local_group_size = 1;  // the DP replicas of one TP rank this host's GPUs hold
  std::string shm_fix;          // what to change where /dev/shm cannot hold the tables
  std::string colocation_fix;   // what to change where the replicas are not co-located
  uint64_t tables_bytes = 0;    // the whole tables: one copy
  int tp = 1;
  uint64_t tp_slice_bytes_max = 0;  // the largest TP slice a rank holds or maps
};

// ------------------------------------------------------------------ ops

struct PlacementOps {
  Placement id;
  const char* name;           // "device_collective", ...: what users read and write
  bool needs_device = false;  // its rows live in GPU memory
  PlacementGroup group = PlacementGroup::kShardGroup;
  // How reports name what its group holds where the group kind does not say
  // it ("head slices"); null: placement_group_text's word for the kind.
  const char* group_text = nullptr;
  // The collective that brings a device lookup's rows back, as reports name
  // it ("reduce-scatter rows (sum)"); null where there is none.
  const char* rows_back_collective = nullptr;
  bool shares_device_memory = false;  // peers map its shards: the group agrees a handle type (plan predicts it)
  bool collective_lookup = false;     // its lookup is a collective over the group
  // Its lookup sums every member's rows, each id's row from its holder and
  // zero rows from the others (the engines' zero-fill and all-reduce), so
  // over more than one member -0 comes back +0 where the engine's sum adds
  // +0 (SGLang: lookup_minus_zero in core/engines/engine_profile.h).
  bool sums_members_rows = false;
  // A device placement whose lookups (host and device) take
  // sequence_parallel_shards themselves and trade each TP rank only its own
  // token shard; the runtime cuts the shard out of every token's rows for the
  // other device placements (and refuses their device lookup under
  // sequence parallelism). Host placements take it in their TP step.
  bool trades_token_shards = false;
  // Its lookup always runs NCCL over its group, and NCCL puts one rank of a
  // communicator on a GPU: ranks sharing a GPU (hosts[].ranks_per_gpu) cannot
  // run it, and the plan refuses them. (The others run there: device_peer
  // without its collective cross-check, host placements with host lookups.)
  bool needs_a_gpu_per_rank = false;
  // Its ranks open a peer's memfd through /proc/<pid>/fd: the ranks sharing
  // a copy must sit in one PID namespace (hosts[].pid_namespace), and the
  // plan refuses them where they do not.
  bool needs_one_pid_namespace = false;
  // Memory one rank costs (model: the placement model's tables).
  PlacementCost (*cost)(const ModelSpec& model, const PlacementCostInput& input) = nullptr;
  // What to change when its host tables outgrow a host's RAM (host placements).
  const char* host_memory_fix = nullptr;
  // Can this rank's backend hold it? (A device placement needs a device.)
  // Checked before build, with the rank in the error; none: always.
  Status (*capable)(const RankBackend& backend) = nullptr;
  // Collective over context.group (and, where it says so, context.host_group).
  Result<std::unique_ptr<PlacementTables>> (*build)(PlacementContext& context) = nullptr;

  // What the tools around the runtime need to know of it:
  // The config that asks the plan for it: edits one whose cpu_offload,
  // peer_shards, dp_shared_memory and placement are reset (none: the reset
  // one asks).
  void (*ask_plan_for)(EngramConfig& config) = nullptr;
  // The backend steps its build runs (the swarm aims step faults there).
  uint8_t steps = kRunsNoBackendStep;  // PlacementSteps bits
  // The plan report's note on how it cuts a table's heads (none: no note).
  std::string (*report_heads)(int heads, int tp, int group_size) = nullptr;
  // What it would do on the doctor's machine, and where the doctor lists it.
  std::string (*doctor_verdict)(const DoctorFacts& facts) = nullptr;
  int doctor_position = 0;
  // Whether it builds the collective path over its shards beside its own
  // (PlacementContext::collective_cross_check), for the acceptance test.
  bool has_collective_cross_check = false;
  BenchReference bench_reference = BenchReference::kNone;
  // The share of the pinned host-to-device copy's rate the bench holds it
  // to at 8192 tokens (0: no such target).
  double bench_pinned_copy_share_min = 0;
  // The time of one lookup step of one layer on one rank: its rows and bytes
  // over each link, its collectives, its launch (core/placements/step_cost.h).
  StepTime (*step_time)(const StepCostInput& input, const StepConstants& constants) = nullptr;
  // For the tools that hold a whole table in one process (the lookup tests,
  // the CPU benchmark): this rank's host lookup with its part cut out of
  // whole_table_bytes as its build would hold it. group: the placement's
  // group (its rank and size pick the part); tp_group: the rank's replica.
  // Null for the device placements, whose rows a device looks up; a caller
  // asks this field instead of switching over placements.
  Status (*lookup_from_whole_table)(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                                    std::span<const std::byte> whole_table_bytes) = nullptr;
};

// The registration table, in Placement order.
std::span<const PlacementOps> placement_registry();
const PlacementOps& placement_ops(Placement placement);

const char* placement_name(Placement placement);  // "device_collective", ...
// What its group holds, for reports: ops.group_text, else "row shards" (shard
// group) or "node-local DP group".
const char* placement_group_text(const PlacementOps& ops);
// parse_placement: core/deployment/placement_id.h.
bool is_device_placement(Placement placement);

// The capability check every device placement shares.
Status needs_a_device(const RankBackend& backend, Placement placement);

// The report note of a placement whose TP ranks hold slices of the heads
// ("" at TP1).
std::string report_tp_slice_heads(int heads, int tp, int group_size);

}  // namespace engram
