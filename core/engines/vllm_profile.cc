// vLLM's rules (docs/design.md section 9), read from its tree:
// - tables split over TP by heads, in HBM and in host memory, a rank holding
//   every token's rows of its padded head shard [T, ceil(H/P), D]
//   (vllm/model_executor/layers/engram/common/engram_parallel.py); with no
//   cpu_offload the placement device_head_sharded;
// - which ranks a device table's heads are cut over, read from
//   vllm-project/vllm (stored commit b380507): vllm/models/deepseek_v4_1/
//   nvidia/engram.py's ParallelEngramEmbedding takes dp_size =
//   get_engram_dp_size() and shards over tp_size x dp_size at
//   engram_head_shard_rank() = tp_rank x dp_size + dp_rank, whatever
//   cpu_offload (only dp_shared_memory, host tables alone, sets dp_size 1:
//   each rank maps its TP slice); its forward all-gathers the ids over that
//   node-local Engram DP group, looks its heads up for every token there,
//   gathers the rows back keeping this replica's, then all-gathers heads
//   over TP. The sharding came with PR 56512 (merged: "Engram tables are
//   sharded across a node-local engram DP (EDP) group instead of being fully
//   replicated per DP rank", enable_engram_dp_sharding default true; the
//   stored config/engram.py @ 13ab20ec no longer has that switch, and the
//   module shards wherever the group has more than one member), and vLLM's
//   tests/distributed/test_engram_dp_shard.py checks the gather with
//   (cpu_offload, dp_shared_memory) = (False, False). So vLLM's device
//   tables are cut over TP x the node-local Engram DP group (shard_group
//   engram_dp); TP alone where _engram_dp_shard_size falls back to 1;
//   TP x every DP rank with embedding_across_dp (that config names Qwen4Exp
//   for it; the profile keeps it, as earlier trees had it for DeepSeek);
// - cpu_offload on by default: EngramConfig.cpu_offload = True, a plain
//   field default since PR 57937 (merged) dropped VLLM_PLE_CPU_OFFLOAD
//   (which defaulted to true before: no change of default);
// - host tables when nothing is shared (point 11 of engramlab issue 47):
//   dp_shared_memory resolves enabled where it can work (PR 57651, merged),
//   else DP head sharding over the node-local Engram DP group
//   (host_head_sharded), as the module and PR 57651's fallback ("falls back
//   to the existing DP head sharding") do. vLLM's docs page
//   (docs/features/engram.md, PR 57910, merged) says instead that each DP
//   replica keeps its own TP-sharded copy unless embedding_across_dp: that
//   reading is the variant replica-copy, never mixed into main;
// - the node-local Engram DP group from _engram_dp_shard_size
//   (vllm/distributed/parallel_state.py; core/deployment/engram_dp_shard_size.h),
//   over the whole world, ranks beyond tp x dp included;
// - scale bytes 0 and 255 as the exponent bits alone: +0 and +inf
//   (tests/distributed/test_engram_dp_shard.py `_reference`);
// - rows come back over the Engram DP group by an all-gather, each rank
//   keeping its own tokens (_gather_engram_rows), and under sequence
//   parallelism by an all-gather over TP keeping the rank's slice; the
//   all-to-all is open PR 56435 (variant sp-all-to-all);
// - -0 kept on every path (MinusZeroRule::kKeep): vLLM gathers and never
//   sums, so engramlab's collectives combine its rows bit for bit;
// - the first Engram DP rank checks /dev/shm *free* space per file at
//   creation and aborts startup (check_shm_free_space);
// - the replica is TP x PP x prefill CP, and under elastic EP there is no
//   Engram DP group;
// - refusals: head shards that leave the last shard without a head
//   (its Engram embedding asserts it, `(shards - 1) * ceil(H / shards) < H`); under elastic EP, dp_shared_memory
//   and embedding_across_dp with dp > 1; thp_packing without cpu_offload or
//   with dp_shared_memory.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/base/size_text.h"
#include "core/deployment/engram_dp_shard_size.h"
#include "core/engines/engine_profiles.h"
#include "core/deployment/dp_shared_memory.h"

namespace engram {
namespace {

// The stored snapshots this profile was read from (the search tools give
// commits, not dates).
constexpr RuleSource kEngramModule = {"vllm-project/vllm", "vllm/models/deepseek_v4_1/nvidia/engram.py",
                                      "1c0e50e5e2b1f57f083113603d2b33cb4404fb7e", SourceState::kMerged};
constexpr RuleSource kEngramConfig = {"vllm-project/vllm", "vllm/config/engram.py",
                                      "13ab20ecf72666374e58f0b199eb95ebde02460b", SourceState::kMerged};
// The Engram DP group and head sharding over it, the shared-table default
// and its fallback, and cpu_offload's plain default, as their PRs merged them.
constexpr RuleSource kDpShardingPr = {"vllm-project/vllm",
                                      "vllm/models/deepseek_v4_1/nvidia/engram.py, vllm/distributed/parallel_state.py "
                                      "(node-local Engram DP group, heads sharded over it)",
                                      "PR 56512", SourceState::kMerged};
constexpr RuleSource kSharedDefaultPr = {"vllm-project/vllm",
                                         "vllm/config/engram.py (dp_shared_memory unset resolves enabled; "
                                         "can_share_engram_tables falls back to DP head sharding)",
                                         "PR 57651", SourceState::kMerged};
constexpr RuleSource kCpuOffloadPr = {"vllm-project/vllm", "vllm/config/engram.py (EngramConfig.cpu_offload = True)",
                                      "PR 57937", SourceState::kMerged};
constexpr RuleSource kDpShardTest = {"vllm-project/vllm", "tests/distributed/test_engram_dp_shard.py",
                                     "5f0f76b5574a319a6d28f9d68e0890bf0cd72568", SourceState::kMerged};
// The file at a commit is not in the search index; the group and its size
// rule came with PR 56512 (vllm-ascend's backport of it names the PR).
constexpr RuleSource kParallelState = {"vllm-project/vllm",
                                       "vllm/distributed/parallel_state.py (_engram_dp_shard_size, the Engram DP group)",
                                       "PR 56512", SourceState::kMerged};
constexpr RuleSource kShmBroadcast = {"vllm-project/vllm",
                                      "vllm/distributed/device_communicators/shm_broadcast.py (check_shm_free_space)",
                                      "f5e441de10bd", SourceState::kMerged};
constexpr RuleSource kSpAllToAllPr = {"vllm-project/vllm", "vllm/models/deepseek_v4_1/nvidia/engram.py", "PR 56435",
                                      SourceState::kOpen};
constexpr RuleSource kWarningsReading = {"vllm-project/vllm",
                                         "the Engram dp_shared_memory fallback warnings (engramlab issue 47's reading)",
                                         "", SourceState::kStoredReading};
constexpr RuleSource kTpSegmentsIssue = {"vllm-project/vllm", "issue 57469 (memcg OOM on 4 x H20)", "issue 57469",
                                         SourceState::kOpen};
constexpr RuleSource kNcclShm = {"NVIDIA/nccl", "src/transport/shm.cc (SHM transport segments in /dev/shm)", "",
                                 SourceState::kStoredReading};

constexpr EngineRule kRules[] = {
    {rule_key::kCpuOffloadDefault, "cpu_offload on unless written (a plain field default; PR 57937 dropped "
                                   "VLLM_PLE_CPU_OFFLOAD, which defaulted to on)",
     kCpuOffloadPr},
    {rule_key::kDeviceTpSplit, "device tables split by heads: a rank holds every token's rows of its head shard",
     kEngramModule},
    {rule_key::kHostTpSplit, "host tables split by heads, as on the device", kEngramModule},
    {rule_key::kNodeLocalGroup,
     "_engram_dp_shard_size(world, dp, replica) with replica = TP x PP x prefill CP; no Engram DP group under "
     "elastic EP",
     kParallelState},
    {rule_key::kHostLayouts, "no host layout names: dp_shared_memory decides (one /dev/shm copy per node), else DP "
                             "head sharding over the Engram DP group",
     kEngramModule},
    {rule_key::kDevicePlacement, "cpu_offload off: device_head_sharded (heads over TP x the Engram DP group)",
     kEngramModule},
    {rule_key::kDeviceShardGroup, "device heads cut over TP x the node-local Engram DP group; TP x DP with "
                                  "embedding_across_dp",
     kDpShardingPr},
    {rule_key::kHostPlacement,
     "host tables: dp_shared_memory (unset: on where it can work) maps one /dev/shm copy (host_shared), else heads "
     "sharded over the Engram DP group (host_head_sharded), never a private copy per replica (the docs' reading: "
     "variant replica-copy)",
     kSharedDefaultPr},
    {rule_key::kRowsBack,
     "rows come back by an all-gather over the Engram DP group, each rank keeping its own tokens "
     "(_gather_engram_rows): the group size times an all-to-all's bytes",
     kEngramModule},
    {rule_key::kSequenceParallel,
     "under sequence parallelism rows are all-gathered over TP and each rank keeps its token slice", kDpShardTest},
    {rule_key::kMinusZero, "-0 stays -0 (bf16 0x8000) on every path: rows are gathered, never summed",
     kEngramModule},
    {rule_key::kScaleBytes, "UE8M0 scale byte 0 -> +0, 255 -> +inf (the exponent bits, `scales << 23`)",
     kDpShardTest},
    {rule_key::kShmAtCreation,
     "the fallback is decided on the /dev/shm total, then the first Engram DP rank checks free space for each file "
     "and aborts startup: \"Insufficient space in /dev/shm: X MiB required, Y MiB free\"",
     kShmBroadcast},
    {rule_key::kVerifyBlocks, "verify blocks may differ in length per request", kDpShardTest},
    {rule_key::kContextParallel,
     "no Engram-specific prefill-CP exchange read; each CP rank's shard hashed after its lookback ids", kDpShardTest},
    {rule_key::kPadding, "DP-slot padding hashes to DEAD (-1): no row read for a padded slot "
                         "(test_engram_hash_padding_has_no_valid_rows)",
     kDpShardTest},
    {rule_key::kFallbackWarnings,
     "of the three fallback warnings only the /dev/shm-size one names --shm-size / --ipc=host; the other two say "
     "\"per rank\"",
     kWarningsReading},
    {rule_key::kRefusals,
     "refuses head shards that leave the last shard without a head; dp_shared_memory and embedding_across_dp "
     "(dp > 1) under elastic EP; thp_packing without cpu_offload or with dp_shared_memory",
     kEngramConfig},
    {rule_key::kExtraMemory,
     "beside the tables: NCCL's /dev/shm segments and vLLM's tensor-parallel weight segments (issue 57469), "
     "not counted",
     kTpSegmentsIssue},
};

constexpr EngineHolding kHoldings[] = {
    {"NCCL's /dev/shm segments (SHM transport between a node's GPUs)", 0, "/dev/shm", kNcclShm},
    {"vLLM's tensor-parallel weight segments in shared memory (issue 57469: a memcg OOM on 4 x H20)", 0,
     "host RAM / the container's memory cgroup", kTpSegmentsIssue},
};

// PR 56435: the all-to-all that brings each rank its own tokens' heads over
// the Engram DP group and, under sequence parallelism, over TP.
constexpr EngineRule kSpAllToAllRules[] = {
    {rule_key::kRowsBack, "rows come back by an all-to-all over the Engram DP group: each rank receives its own "
                          "tokens' head slices",
     kSpAllToAllPr},
    {rule_key::kSequenceParallel,
     "under sequence parallelism each TP rank receives its own token shard's heads by an all-to-all over TP",
     kSpAllToAllPr},
};
void apply_sp_all_to_all(EngineProfile& p) {
  p.rows_back = RowsBack::kAllToAll;
  p.sp_rows_back = SpRowsBack::kAllToAllTokenShards;
}

// vLLM's docs page, "Data-parallel topologies (DeepSeek V4.1)": "By default
// (embedding_across_dp: false), each DP replica keeps its own TP-sharded copy
// of the tables -- no cross-replica communication, but one host copy per
// replica" (as config/engram.py's embedding_across_dp docstring says). Its
// code (PR 56512) and tests shard heads over the Engram DP group instead:
// main's rule, this the named variant.
constexpr RuleSource kReplicaCopyDocs = {"vllm-project/vllm",
                                         "docs/features/engram.md (Data-parallel topologies; added by PR 57910)",
                                         "0952bd725bab8e3490cacafc1e32ed220699871e", SourceState::kMerged};
constexpr EngineRule kReplicaCopyRules[] = {
    {rule_key::kNodeLocalGroup, "no DP head sharding: every replica is its own group", kReplicaCopyDocs},
    {rule_key::kHostPlacement, "each DP replica keeps its own TP-sharded host copy (host_private): table x dp_local "
                               "per node",
     kReplicaCopyDocs},
    {rule_key::kDeviceShardGroup, "device heads cut over a replica's TP ranks; TP x DP with embedding_across_dp",
     kReplicaCopyDocs},
};
void apply_replica_copy(EngineProfile&) {}  // its groups and placements read p.variant

constexpr EngineVariant kVariants[] = {
    {"sp-all-to-all", "rows back by all-to-all over the Engram DP group and, under SP, over TP (open PR 56435)",
     kSpAllToAllPr, kSpAllToAllRules, apply_sp_all_to_all},
    {"replica-copy",
     "the docs' reading: one TP-sharded copy per DP replica unless embedding_across_dp (main's code shards heads "
     "over the Engram DP group)",
     kReplicaCopyDocs, kReplicaCopyRules, apply_replica_copy},
};

bool replica_copy(const EngineProfile& self) {
  return self.variant != nullptr && std::string_view(self.variant->name) == "replica-copy";
}

constexpr HostLayoutOption kLayouts[] = {
    {"auto", "",
     "dp_shared_memory: one copy per node in /dev/shm (host_shared), else DP head sharding over the node-local "
     "Engram DP group (host_head_sharded)"},
};

// The node of every rank of the engine's world: the Engram ranks as the
// deployment maps them, then layout.extra_ranks in the hosts' free slots,
// host by host. Empty where the extra ranks do not fit.
std::vector<int> world_nodes(const Deployment& d) {
  std::vector<int> nodes(d.rank_hosts.begin(), d.rank_hosts.end());
  std::vector<int> used(d.hosts.size(), 0);
  for (int h : d.rank_hosts) ++used[static_cast<size_t>(h)];
  int left = d.layout.extra_ranks;
  for (size_t h = 0; h < d.hosts.size() && left > 0; ++h)
    for (int free = rank_slots(d.hosts[h]) - used[h]; free > 0 && left > 0; --free, --left)
      nodes.push_back(static_cast<int>(h));
  if (left > 0) nodes.clear();
  return nodes;
}

int free_slots(const Deployment& d) {
  int total = 0;
  for (const HostSpec& h : d.hosts) total += rank_slots(h);
  return total - static_cast<int>(d.rank_hosts.size());
}

}  // namespace

// vLLM's group size: _engram_dp_shard_size over the whole world with its
// replica of TP x PP x prefill CP (engramlab's prefill CP groups are
// prefill_cp consecutive DP replicas, so vLLM's DP is dp / prefill_cp; PP is
// not modelled: 1); 1 under elastic EP, where vLLM builds no Engram DP group.
int vllm_engram_dp_size(const Deployment& d) {
  if (d.layout.elastic_ep) return 1;
  const std::vector<int> nodes = world_nodes(d);
  ENGRAM_CHECK_MSG(!nodes.empty(), "layout.extra_ranks beyond the hosts' slots (validate refuses it)");
  const int cp = std::max(d.layout.prefill_cp, 1);
  ENGRAM_CHECK(d.layout.dp % cp == 0);
  const Result<int> shard = engram_dp_shard_size(nodes, d.layout.dp / cp, d.layout.tp * cp);
  ENGRAM_CHECK(shard.is_ok());
  return shard.value();
}

namespace {

// vLLM's group: for each rank of a replica (TP x prefill CP ranks), `size`
// contiguous replicas.
NodeLocalGroups groups(const EngineProfile& self, const Deployment& d) {
  const int size = replica_copy(self) ? 1 : vllm_engram_dp_size(d);
  const int cp = std::max(d.layout.prefill_cp, 1);
  const int replica = d.layout.tp * cp, replicas = d.layout.dp / cp, world = d.layout.world_size();
  ENGRAM_CHECK(size >= 1 && replicas % size == 0);
  NodeLocalGroups out;
  out.host_misaligned.assign(d.hosts.size(), false);
  out.group_by_rank.resize(static_cast<size_t>(world));
  out.size_by_rank.assign(static_cast<size_t>(world), size);
  out.index_by_rank.resize(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const int vllm_replica = r / replica;
    out.group_by_rank[static_cast<size_t>(r)] = (vllm_replica / size) * replica + r % replica;
    out.index_by_rank[static_cast<size_t>(r)] = vllm_replica % size;
    // vLLM falls back to 1 where nodes do not hold whole, contiguous replicas.
    if (size == 1 && replicas > 1 && !d.layout.elastic_ep && !replica_copy(self))
      out.host_misaligned[static_cast<size_t>(d.rank_hosts[static_cast<size_t>(r)])] = true;
  }
  out.group_count = (replicas / size) * replica;
  return out;
}

Status validate(const EngineProfile& v, const Deployment& d, const ModelSpec& model) {
  const ParallelLayout& l = d.layout;
  const EngramConfig& c = d.config;
  if (l.extra_ranks > free_slots(d))
    return invalid_argument(fmt::format(
        "layout.extra_ranks: {} ranks beyond tp x dp = {} do not fit the hosts' {} free GPU slots; give more hosts or "
        "GPUs, or fewer extra ranks",
        l.extra_ranks, l.world_size(), std::max(free_slots(d), 0)));
  int heads = 0;
  for (const TableSpec& t : model.tables) heads = heads == 0 ? t.head_count() : std::min(heads, t.head_count());
  // vLLM's Engram embedding: heads are cut into shards of ceil(H / shards) and vLLM
  // asserts (shards - 1) x ceil(H / shards) < H, i.e. the last shard keeps
  // a head. Shards: tp x the Engram DP group, on the device as in host
  // memory (1 with dp_shared_memory, whose ranks map TP slices); tp x dp
  // with embedding_across_dp on the device.
  const bool shared = c.cpu_offload && resolve_dp_shared_memory(c, l).enabled;
  const int group = shared ? 1 : groups(v, d).size_by_rank.front();
  const int shards = c.embedding_across_dp && !c.cpu_offload ? l.tp * l.dp : l.tp * group;
  const int per_shard = (heads + shards - 1) / shards;
  if (static_cast<int64_t>(shards - 1) * per_shard >= heads) {
    const bool by_tp = shards == l.tp;
    return engine_refuses(
        v, by_tp ? "layout.tp" : c.embedding_across_dp ? "config.embedding_across_dp" : "layout.dp",
        by_tp ? std::to_string(l.tp) : c.embedding_across_dp ? "true" : std::to_string(l.dp),
        fmt::format("Engram sharding leaves ranks without hash heads: {} heads over {} shards ({}) are {} per shard, "
                    "so the last shard gets none",
                    heads, shards,
                    by_tp ? fmt::format("TP {}", l.tp)
                          : fmt::format("TP {} x {} {}", l.tp, c.embedding_across_dp ? "DP" : "Engram DP group of",
                                        shards / l.tp),
                    per_shard),
        "choose a shard count whose last shard keeps a head (a divisor of the head count always does)");
  }
  if (l.elastic_ep && c.dp_shared_memory.value_or(false))
    return engine_refuses(v, "config.dp_shared_memory", "true",
                          "elastic expert parallelism adds and removes DP replicas at run time, and a node's shared "
                          "table is built for a fixed set of them",
                          "turn elastic EP off, or leave dp_shared_memory unset or false");
  if (l.elastic_ep && c.embedding_across_dp && l.dp > 1)
    return engine_refuses(v, "config.embedding_across_dp", "true",
                          fmt::format("elastic expert parallelism changes the DP size at run time, and sharding over "
                                      "TP x DP (dp {}) fixes it",
                                      l.dp),
                          "turn elastic EP off, or leave embedding_across_dp off");
  if (c.thp_packing && !c.cpu_offload)
    return engine_refuses(v, "config.thp_packing", "true",
                          "it packs the host tables in transparent huge pages, and with cpu_offload off there are none",
                          "turn cpu_offload on, or thp_packing off");
  if (c.thp_packing && resolve_dp_shared_memory(c, l).enabled)
    return engine_refuses(v, "config.thp_packing", "true",
                          "it packs a replica's own host tables, and dp_shared_memory maps one shared /dev/shm copy "
                          "instead (resolved enabled here)",
                          "set dp_shared_memory: false, or thp_packing off");
  return Status::ok();
}

// vLLM's device tables: heads over TP x the node-local Engram DP group
// (nvidia/engram.py, above), or over TP x DP with embedding_across_dp.
std::optional<ShardGroup> device_shard_group(const EngineProfile& self, const EngramConfig& c) {
  if (c.embedding_across_dp) return ShardGroup::kWorld;
  return replica_copy(self) ? ShardGroup::kReplica : ShardGroup::kEngramDp;
}

Result<Placement> placement_of(const EngineProfile& self, const Deployment& d, Placement decided) {
  ENGRAM_ASSIGN_OR_RETURN(Placement p, host_layout_placement(self, d.config, decided));
  if (p == Placement::kDeviceCollective)
    return placement_named(self, "device_head_sharded", "a device layout (cpu_offload off)");
  // Main shards heads over the Engram DP group; the docs' reading keeps a copy per replica.
  if (p == Placement::kHostPrivate && !replica_copy(self)) return Placement::kHostHeadSharded;
  if (p == Placement::kHostHeadSharded && replica_copy(self)) return Placement::kHostPrivate;
  return p;
}

// check_shm_free_space on the first Engram DP rank, for each file it
// creates (one per table per TP rank: that rank's head shard), against what
// /dev/shm has free: the total less what other processes hold and the files
// already made. vLLM words the abort so; engramlab's rule reads the total
// alone and would build host_shared.
Status check_at_creation(const Deployment& d, const ModelSpec& model, std::span<const Placement> placement_by_host) {
  constexpr uint64_t kMib = 1ull << 20;
  for (size_t h = 0; h < d.hosts.size() && h < placement_by_host.size(); ++h) {
    if (placement_by_host[h] != Placement::kHostShared) continue;
    const HostSpec& host = d.hosts[h];
    uint64_t free_bytes = host.tmpfs_bytes_total - std::min(host.tmpfs_bytes_used, host.tmpfs_bytes_total);
    const int tp = d.layout.tp;
    for (const TableSpec& t : model.tables) {
      const int heads = t.head_count(), per = (heads + tp - 1) / tp;
      for (int s = 0; s < tp; ++s) {
        int64_t rows = 0;
        for (int head = s * per; head < std::min((s + 1) * per, heads); ++head)
          rows += t.primes[static_cast<size_t>(head)];
        const uint64_t file_bytes = static_cast<uint64_t>(rows) * t.row_bytes();
        if (file_bytes > free_bytes)
          return failed_precondition(fmt::format(
              "host '{}' (hosts[{}]): engine vllm aborts startup: \"Engram shared-memory creation failed on EDP rank "
              "0: RuntimeError: Insufficient space in /dev/shm: {:.0f} MiB required, {:.0f} MiB free. Increase "
              "/dev/shm (e.g. --shm-size or --ipc=host).\" vLLM chose dp_shared_memory on the /dev/shm total ({}), "
              "then found layer {}'s TP-{} file beyond the free space ({} of it already held: hosts[{}].shm_used, "
              "and the files made before it); free /dev/shm, or give it {} more",
              host.name, h, static_cast<double>(file_bytes) / kMib, static_cast<double>(free_bytes) / kMib,
              format_size_short(host.tmpfs_bytes_total), t.layer_id, s, format_size_short(host.tmpfs_bytes_used), h,
              format_size_short(file_bytes - free_bytes)));
        free_bytes -= file_bytes;
      }
    }
  }
  return Status::ok();
}

}  // namespace

const EngineProfile kVllmProfile = {
    .id = EngineId::kVllm,
    .name = "vllm",
    .source = "vllm/models/deepseek_v4_1/nvidia/engram.py, vllm/config/engram.py, vllm/distributed/parallel_state.py, "
              "tests/distributed/test_engram_dp_shard.py",
    .version = {"main: nvidia/engram.py @ 1c0e50e5, config/engram.py @ 13ab20ec, test_engram_dp_shard.py @ 5f0f76b5, "
                "with merged PRs 56512, 57651, 57910 and 57937",
                "commit dates not in the search index; the PRs opened 2026-09-11 to 2026-09-21",
                "stored snapshots and PR threads read with the search tools; parallel_state.py's Engram group as "
                "PR 56512 added it"},
    .rules = kRules,
    .variants = kVariants,
    .cpu_offload_default = true,
    .cpu_offload_default_source = "EngramConfig.cpu_offload = True, a plain default since PR 57937",
    .device_tp_split = TpSplit::kHeads,
    .host_tp_split = TpSplit::kHeads,
    .scale_byte_rule = ScaleByteRule::kVllm,
    .minus_zero = MinusZeroRule::kKeep,
    .rows_back = RowsBack::kAllGatherKeepOwn,
    .sp_rows_back = SpRowsBack::kAllGatherKeepSlice,
    .fallback_wording = FallbackWording::kVllm,
    .holdings = kHoldings,
    .check_at_creation = check_at_creation,
    .settings = {.dp_shared_memory = true, .embedding_across_dp = true, .thp_packing = true},
    .host_layouts = kLayouts,
    .node_local_groups = groups,
    .validate = validate,
    .placement_of = placement_of,
    .device_shard_group = device_shard_group,
};

}  // namespace engram
