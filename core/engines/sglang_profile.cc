// SGLang's rules (docs/design.md section 9). The search tools did not find
// SGLang's Engram files in their code index; its merged PR 39666 (2026-09-15,
// "dsv4.1: Engram module and request history support") states the device
// placement, the gather kernels with their torch fallbacks and the hasher,
// and those rules cite it. The rest cite the stored reading of
// docs/design.md sections 9 and 10 (path as read there, commit unknown) or
// the PR/issue they name:
// - device tables split over TP by rows, zero-fill and all-reduce; with DP
//   attention ids all-gathered over DP and rows reduce-scattered back
//   (seed 000): device_collective, device_peer where peer_shards asks;
// - cpu_offload off unless a host-table layout is asked for;
// - host layouts as upstream names them: `shared` (the default: one memfd per
//   TP group made by its TP rank 0, peers open /proc/<pid>/fd/<n>) and
//   `per_rank` (a row shard per rank, summed back by an all-reduce); the host
//   TP split is by rows. `numa_shared` is open PR 40106, `file` exists only in
//   forks, and older versions had `private` and `auto` (chosen by the THP
//   sysfs knobs): each a named variant;
// - no node-local Engram DP group: each rank is its own group;
// - scale bytes: its CUDA engram_gather (every NVIDIA deployment) decodes
//   0 -> 2^-127 (_E8M0_ZERO) and 255 -> +inf (the exponent bits); NaN only in
//   its torch fallback (ROCm other than gfx950, CPU): variant torch-fallback;
// - -0 kept at tp 1 and on its shared host table, lost where its all-reduce
//   adds +0 (MinusZeroRule::kKeepUnlessSummed: +0 on a placement that sums
//   its members' rows over more than one member, device_collective and
//   sglang_private; kept on every other path);
// - verify blocks equal per request (it asserts; issue 39173 is open);
// - context-parallel prefill hashes the whole prompt on every CP rank and
//   all-gathers hash ids over the attention CP group (no token halo);
// - graph padding hashes to all-pad valid ids; DP-attention padding looks up
//   row 0 and discards it.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/base/text_list.h"
#include "core/engines/engine_profiles.h"
#include "core/model/hash_overrides.h"

namespace engram {
namespace {

constexpr char kRepo[] = "sgl-project/sglang";
constexpr RuleSource kEngramModule = {kRepo, "python/sglang/srt/layers/engram/ (the engram module)", "",
                                      SourceState::kStoredReading};
// The merged PR that added the module (2026-09-15): its description states
// the device placement (rows sharded over the TP group, reassembled with an
// all-reduce; under DP attention the ids of every DP rank gathered first)
// and that the gather runs as kernels/ops/embeddings/engram_* with torch
// fallbacks on ROCm and CPU. What it does not state and the rules still rest
// on the stored reading for: the exact row cut, the reduce-scatter under DP
// attention, -0 lost in the all-reduce (read off the sum) and the decoded
// scale-byte values; the path strings below say so.
constexpr RuleSource kEngramModulePr = {
    kRepo, "python/sglang/srt/layers/engram.py (the Engram module; row cut and DP-attention detail: stored reading)",
    "PR 39666", SourceState::kMerged};
constexpr RuleSource kGatherKernels = {
    kRepo, "kernels/ops/embeddings/engram_* (gather; torch fallback on ROCm, CPU; byte values: stored reading)",
    "PR 39666", SourceState::kMerged};
constexpr RuleSource kHostTable = {kRepo, "python/sglang/srt/layers/engram/host_table.py", "",
                                   SourceState::kStoredReading};
constexpr RuleSource kHasher = {kRepo, "EngramHasher (history, update_after_verify)", "PR 39666",
                                SourceState::kMerged};
constexpr RuleSource kRaggedVerifyIssue = {kRepo, "ragged verify blocks crashed capture", "issue 39173",
                                           SourceState::kOpen};
constexpr RuleSource kNumaSharedPr = {kRepo, "python/sglang/srt/layers/engram/host_table.py (numa_shared)", "PR 40106",
                                      SourceState::kOpen};
constexpr RuleSource kFileFork = {kRepo, "host_table.py `file` layout (forks of sgl-project/sglang only)", "",
                                  SourceState::kFork};
constexpr RuleSource kOlderLayouts = {kRepo, "host_table.py before `per_rank` (shared, private, auto by THP sysfs)",
                                      "", SourceState::kStoredReading};
constexpr RuleSource kNcclShm = {"NVIDIA/nccl", "src/transport/shm.cc (SHM transport segments in /dev/shm)", "",
                                 SourceState::kStoredReading};

constexpr EngineRule kRules[] = {
    {rule_key::kCpuOffloadDefault, "cpu_offload off unless a host layout is asked for", kHostTable},
    {rule_key::kDeviceTpSplit, "device tables split by rows: rank r owns rows [N*r/tp, N*(r+1)/tp), zero-fill and "
                               "all-reduce",
     kEngramModulePr},
    {rule_key::kHostTpSplit, "host tables split by rows (per_rank: a row shard per rank, summed by an all-reduce)",
     kHostTable},
    {rule_key::kNodeLocalGroup, "no node-local Engram DP group: a rank shares only what its host layout maps",
     kEngramModule},
    {rule_key::kHostLayouts, "host layouts `shared` (default: one memfd per TP group, peers open /proc/<pid>/fd/<n>) "
                             "and `per_rank`",
     kHostTable},
    {rule_key::kDevicePlacement, "cpu_offload off: device_collective (row shards over TP, or the DP-attention "
                                 "group); device_peer where peer_shards asks",
     kEngramModulePr},
    {rule_key::kHostPlacement, "the host layout decides: shared -> sglang_shared, per_rank -> sglang_private",
     kHostTable},
    {rule_key::kRowsBack, "rows summed back: zero-fill and all-reduce (reduce-scatter with DP attention)",
     kEngramModulePr},
    {rule_key::kSequenceParallel, "no sequence-parallel Engram path read: every TP rank gets every token's rows",
     kEngramModule},
    {rule_key::kMinusZero, "-0 kept at tp 1 and on its shared host table, lost where its all-reduce adds +0",
     kEngramModulePr},
    {rule_key::kScaleBytes, "UE8M0 scale byte 0 -> 2^-127, 255 -> +inf in its CUDA engram_gather (NaN only in the "
                            "torch fallback: ROCm other than gfx950, CPU)",
     kGatherKernels},
    {rule_key::kShmAtCreation, "memfd tables: nothing in /dev/shm", kHostTable},
    {rule_key::kVerifyBlocks, "verify blocks must be equal per request (it asserts; ragged blocks: issue 39173)",
     kRaggedVerifyIssue},
    {rule_key::kContextParallel, "prefill CP: the whole prompt hashed on every CP rank, hash ids all-gathered over "
                                 "the attention CP group, each rank keeping its slice (no token halo)",
     kHasher},
    {rule_key::kPadding, "graph padding hashes to all-pad valid ids (rows read); DP-attention padding looks up row 0 "
                         "and discards it",
     kHasher},
    {rule_key::kFallbackWarnings, "no dp_shared_memory fallback: `shared` needs one host and one PID namespace, "
                                  "else an error",
     kHostTable},
    {rule_key::kRefusals, "rows split over any tp; a shared memfd across PID namespaces is an error", kHostTable},
    {rule_key::kExtraMemory, "beside the tables: NCCL's /dev/shm segments, not counted", kNcclShm},
};

constexpr EngineHolding kHoldings[] = {
    {"NCCL's /dev/shm segments (SHM transport between a node's GPUs)", 0, "/dev/shm", kNcclShm},
};

constexpr HostLayoutOption kLayouts[] = {
    {"shared", "sglang_shared", "one memfd per TP group made by TP rank 0, opened through /proc/<pid>/fd"},
    {"per_rank", "sglang_private", "a row shard per rank in host memory, summed back by an all-reduce"},
};
constexpr HostLayoutOption kNumaSharedLayouts[] = {
    {"shared", "sglang_shared", "one memfd per TP group made by TP rank 0, opened through /proc/<pid>/fd"},
    {"per_rank", "sglang_private", "a row shard per rank in host memory, summed back by an all-reduce"},
    {"numa_shared", "sglang_numa_shared", "one copy per NUMA node of the GPUs, bound before first touch (PR 40106)"},
};
constexpr HostLayoutOption kFileLayouts[] = {
    {"shared", "sglang_shared", "one memfd per TP group made by TP rank 0, opened through /proc/<pid>/fd"},
    {"per_rank", "sglang_private", "a row shard per rank in host memory, summed back by an all-reduce"},
    {"file", "sglang_file", "a table file mapped MAP_SHARED, unpinned, looked up on the CPU (forks only)"},
};
constexpr HostLayoutOption kOlderLayouts2[] = {
    {"auto", "sglang_shared", "chosen by the THP sysfs knobs; engramlab takes it as shared (the knobs are not read)"},
    {"shared", "sglang_shared", "one memfd per TP group made by TP rank 0, opened through /proc/<pid>/fd"},
    {"private", "sglang_private", "a row shard per rank in host memory, summed back by an all-reduce"},
};

constexpr EngineRule kNumaSharedRules[] = {
    {rule_key::kHostLayouts, "host layouts shared (default), per_rank and numa_shared (one copy per GPU NUMA node)",
     kNumaSharedPr},
};
constexpr EngineRule kFileRules[] = {
    {rule_key::kHostLayouts, "host layouts shared (default), per_rank and file (MAP_SHARED, MADV_RANDOM, unpinned)",
     kFileFork},
};
constexpr EngineRule kOlderRules[] = {
    {rule_key::kHostLayouts, "host layouts auto (default, by the THP sysfs knobs), shared and private", kOlderLayouts},
};
constexpr EngineRule kTorchFallbackRules[] = {
    {rule_key::kScaleBytes, "UE8M0 scale byte 0 -> 2^-127, 255 -> NaN (torch float8_e8m0fnu)", kGatherKernels},
};

// The newest device path the stored reading names (docs/design.md section
// 9: "confirm on main"; the search tools did not find it on main): shards in
// torch symmetric memory cut on hash-column boundaries when the head count
// divides by tp, read by peers without a collective, on when capable.
constexpr RuleSource kSymmetricMemory = {kRepo, "the engram module's symmetric-memory device path", "",
                                         SourceState::kStoredReading};
constexpr EngineRule kSymmetricMemoryRules[] = {
    {rule_key::kDevicePlacement,
     "cpu_offload off: shards in torch symmetric memory cut on hash-column boundaries where every table's head "
     "count divides by tp (24 % tp == 0), read by peers without a collective (device_peer); else device_collective",
     kSymmetricMemory},
};

void apply_numa_shared(EngineProfile& p) { p.host_layouts = kNumaSharedLayouts; }
void apply_file(EngineProfile& p) { p.host_layouts = kFileLayouts; }
void apply_older(EngineProfile& p) { p.host_layouts = kOlderLayouts2; }
void apply_torch_fallback(EngineProfile& p) { p.scale_byte_rule = ScaleByteRule::kSglangTorch; }

void apply_symmetric_memory(EngineProfile&) {}  // placement_of reads p.variant

constexpr EngineVariant kVariants[] = {
    {"symm-mem",
     "the device path in torch symmetric memory, column-aligned shards read without a collective (stored reading; "
     "not confirmed on main)",
     kSymmetricMemory, kSymmetricMemoryRules, apply_symmetric_memory},
    {"numa-shared", "the numa_shared host layout of open PR 40106", kNumaSharedPr, kNumaSharedRules,
     apply_numa_shared},
    {"file", "the `file` host layout, which exists only in forks", kFileFork, kFileRules, apply_file},
    {"older-layouts", "older versions' host layouts: auto (by the THP sysfs knobs), shared, private", kOlderLayouts,
     kOlderRules, apply_older},
    {"torch-fallback", "its torch fallback path (ROCm other than gfx950, CPU): scale byte 255 decodes to NaN",
     kGatherKernels, kTorchFallbackRules, apply_torch_fallback},
};

NodeLocalGroups groups(const EngineProfile&, const Deployment& d) {
  const int world = d.layout.world_size();
  NodeLocalGroups out;
  out.host_misaligned.assign(d.hosts.size(), false);
  out.group_by_rank.resize(static_cast<size_t>(world));
  out.size_by_rank.assign(static_cast<size_t>(world), 1);
  out.index_by_rank.assign(static_cast<size_t>(world), 0);
  for (int r = 0; r < world; ++r) out.group_by_rank[static_cast<size_t>(r)] = r;
  out.group_count = world;
  return out;
}

// Rows split over TP: any tp works; what it refuses is the settings it lacks.
Status validate(const EngineProfile&, const Deployment&, const ModelSpec&) { return Status::ok(); }

// Every table's head count divides by tp: the shards fall on hash-column boundaries.
bool column_aligned(const Deployment& d) {
  const Result<ModelSpec> model = resolve_model(d.model, d.model_hash, "model");
  if (!model.is_ok()) return false;
  for (const TableSpec& t : model->tables)
    if (t.head_count() % d.layout.tp != 0) return false;
  return true;
}

Result<Placement> placement_of(const EngineProfile& self, const Deployment& d, Placement decided) {
  const bool symmetric_memory = self.variant != nullptr && std::string_view(self.variant->name) == "symm-mem";
  if (decided == Placement::kDeviceCollective && symmetric_memory && column_aligned(d)) return Placement::kDevicePeer;
  if (is_device_placement(decided)) return decided;
  ENGRAM_ASSIGN_OR_RETURN(const HostLayoutOption* layout, host_layout_of(self, d.config));
  return placement_named(self, layout->placement, fmt::format("host layout '{}'", layout->name));
}

// The `shared` host layout (kHostTable, sgl-project/sglang
// python/sglang/srt/layers/engram/host_table.py, stored reading, no commit):
// one memfd for the TP group, made by TP rank 0 and opened by the others
// through /proc/<pid>/fd/<n>. sgl-project/sglang PR 40106 (open, 2026-09-18,
// its description) says the same of `shared`: "the only host copy", on the
// node rank 0 first touches, which its numa_shared layout splits per NUMA
// node and refuses across hosts. SGLang's TP group is every rank of the
// deployment (tp x dp: under DP attention the replicas are attention groups
// of one TP group), so a job on more than one host cannot open it there:
// SGLang fails, and so does the plan, naming the hosts (kFallbackWarnings:
// `shared` needs one host, else an error).
Status check_at_creation(const Deployment& d, const ModelSpec&, std::span<const Placement> placement_by_host) {
  if (std::find(placement_by_host.begin(), placement_by_host.end(), Placement::kSglangShared) ==
      placement_by_host.end())
    return Status::ok();
  std::vector<int> hosts(d.rank_hosts.begin(), d.rank_hosts.end());
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  if (hosts.size() <= 1) return Status::ok();
  const HostSpec& first = d.hosts[static_cast<size_t>(d.rank_hosts.front())];
  std::vector<std::string> others;  // the hosts without TP rank 0
  for (int h : hosts)
    if (h != d.rank_hosts.front()) others.push_back(d.hosts[static_cast<size_t>(h)].name);
  return failed_precondition(fmt::format(
      "sglang_shared: SGLang's `shared` memfd belongs to its TP group, all {} ranks (tp {} x dp {}), made by TP rank 0 "
      "on {}; ranks on {} cannot open it through /proc/<pid>/fd. Use host_layout: per_rank, cpu_offload: false, or "
      "one node",
      d.layout.world_size(), d.layout.tp, d.layout.dp, first.name, join_limited(others)));
}

}  // namespace

const EngineProfile kSglangProfile = {
    .id = EngineId::kSglang,
    .name = "sglang",
    .source = "python/sglang/srt/layers/engram/ (engram_gather, host_table.py, EngramHasher)",
    .version = {"main after PR 39666 (merged), as docs/design.md sections 9-10 read it", "2026-09-15 (PR 39666)",
                "the search tools did not find SGLang's engram files; the device placement, gather kernels and hasher "
                "cite PR 39666's description, the host layouts and the rest the stored reading"},
    .rules = kRules,
    .variants = kVariants,
    .cpu_offload_default = false,
    .cpu_offload_default_source = "SGLang: off unless a host layout is asked for",
    .device_tp_split = TpSplit::kRows,
    .host_tp_split = TpSplit::kRows,
    .scale_byte_rule = ScaleByteRule::kSglang,
    .minus_zero = MinusZeroRule::kKeepUnlessSummed,
    .rows_back = RowsBack::kAllToAll,
    .sp_rows_back = SpRowsBack::kAllToAllTokenShards,
    .cp_hashing = CpHashing::kWholePromptAllGatherIds,
    .padding = PaddingRule::kSglang,
    .fallback_wording = FallbackWording::kEngramlab,
    .equal_verify_blocks = true,
    .holdings = kHoldings,
    .check_at_creation = check_at_creation,
    .settings = {.peer_shards = true},
    .host_layouts = kLayouts,
    .node_local_groups = groups,
    .validate = validate,
    .placement_of = placement_of,
};

}  // namespace engram
