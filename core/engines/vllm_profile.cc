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
//   over TP. vllm/config/engram.py: enable_engram_dp_sharding (default true,
//   "Shard DeepSeek V4.1 hash heads across node-local DP replicas. Set to
//   false to keep a separate TP-sharded table per replica"), and
//   tests/distributed/test_engram_dp_shard.py checks the gather with
//   (cpu_offload, dp_shared_memory) = (False, False). So vLLM's device
//   tables are cut over TP x the node-local Engram DP group (shard_group
//   engram_dp); TP alone where _engram_dp_shard_size falls back to 1 (or
//   enable_engram_dp_sharding is false, which this profile does not model);
//   TP x every DP rank with embedding_across_dp (that config names Qwen4Exp
//   for it; the profile keeps it, as earlier trees had it for DeepSeek);
// - cpu_offload on by default (VLLM_PLE_CPU_OFFLOAD, default true);
// - host tables by dp_shared_memory (seed 001), otherwise DP head sharding
//   over the node-local Engram DP group: host_head_sharded, never a private
//   copy per replica;
// - the node-local Engram DP group from _engram_dp_shard_size
//   (vllm/distributed/parallel_state.py; core/deployment/engram_dp_shard_size.h),
//   over the whole world, ranks beyond tp x dp included;
// - scale bytes 0 and 255 as the exponent bits alone: +0 and +inf
//   (tests/distributed/test_engram_dp_shard.py `_reference`);
// - refusals: head shards that leave the last shard without a head
//   (its Engram embedding asserts it, `(shards - 1) * ceil(H / shards) < H`); under elastic EP, dp_shared_memory
//   and embedding_across_dp with dp > 1; thp_packing without cpu_offload or
//   with dp_shared_memory.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/deployment/engram_dp_shard_size.h"
#include "core/engines/engine_profiles.h"
#include "core/deployment/dp_shared_memory.h"

namespace engram {
namespace {

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

// vLLM's group: for each TP rank, `size` contiguous DP ranks.
NodeLocalGroups groups(const Deployment& d) {
  const std::vector<int> nodes = world_nodes(d);
  ENGRAM_CHECK_MSG(!nodes.empty(), "layout.extra_ranks beyond the hosts' slots (validate refuses it)");
  const Result<int> shard = engram_dp_shard_size(nodes, d.layout.dp, d.layout.tp);
  ENGRAM_CHECK(shard.is_ok());
  const int size = shard.value();
  const int tp = d.layout.tp, world = d.layout.world_size();
  ENGRAM_CHECK(size >= 1 && d.layout.dp % size == 0);
  NodeLocalGroups out;
  out.host_misaligned.assign(d.hosts.size(), false);
  out.group_by_rank.resize(static_cast<size_t>(world));
  out.size_by_rank.assign(static_cast<size_t>(world), size);
  out.index_by_rank.resize(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const int dp_rank = r / tp;
    out.group_by_rank[static_cast<size_t>(r)] = (dp_rank / size) * tp + r % tp;
    out.index_by_rank[static_cast<size_t>(r)] = dp_rank % size;
    // vLLM falls back to 1 where nodes do not hold whole, contiguous replicas.
    if (size == 1 && d.layout.dp > 1) out.host_misaligned[static_cast<size_t>(d.rank_hosts[static_cast<size_t>(r)])] = true;
  }
  out.group_count = (d.layout.dp / size) * tp;
  return out;
}

Status validate(const Deployment& d, const ModelSpec& model) {
  const EngineProfile& v = kVllmProfile;
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
  const int group = shared ? 1 : groups(d).size_by_rank.front();
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
std::optional<ShardGroup> device_shard_group(const EngramConfig& c) {
  return c.embedding_across_dp ? ShardGroup::kWorld : ShardGroup::kEngramDp;
}

Result<Placement> placement_of(const Deployment& d, Placement decided) {
  ENGRAM_ASSIGN_OR_RETURN(Placement p, host_layout_placement(kVllmProfile, d.config, decided));
  if (p == Placement::kDeviceCollective)
    return placement_named(kVllmProfile, "device_head_sharded", "a device layout (cpu_offload off)");
  if (p == Placement::kHostPrivate) return Placement::kHostHeadSharded;
  return p;
}

}  // namespace

const EngineProfile kVllmProfile = {
    .id = EngineId::kVllm,
    .name = "vllm",
    .source = "vllm/model_executor/layers/engram/common/engram_parallel.py, vllm/models/deepseek_v4_1/nvidia/engram.py, "
              "vllm/config/engram.py, vllm/distributed/parallel_state.py",
    .cpu_offload_default = true,
    .cpu_offload_default_source = "VLLM_PLE_CPU_OFFLOAD defaults to true",
    .device_tp_split = TpSplit::kHeads,
    .host_tp_split = TpSplit::kHeads,
    .scale_byte_rule = ScaleByteRule::kVllm,
    .settings = {.dp_shared_memory = true, .embedding_across_dp = true, .thp_packing = true},
    .host_layouts = kLayouts,
    .node_local_groups = groups,
    .validate = validate,
    .placement_of = placement_of,
    .device_shard_group = device_shard_group,
};

}  // namespace engram
