// What users write: the machines (topology), the parallel layout and the
// Engram settings. docs/design.md section 3. Plain data; parsing lives in
// core/deployment_file/deployment_yaml.*, decisions in core/plan/config_resolution.* and
// core/plan/placement_rules.*.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/deployment/runtime_environment.h"
#include "core/deployment/engine_id.h"
#include "core/model/hash_overrides.h"

namespace engram {

// The most one deployment may describe: far above any real job, low enough
// that a plan of it fits in memory and no size sum can wrap. Parsers and
// validate_and_complete refuse more with an error naming the cap.
inline constexpr int kMaxHosts = 1 << 17;  // 131,072
inline constexpr int kMaxRanks = 1 << 20;  // 1,048,576
inline constexpr int kMaxGpusPerHost = 1024;
inline constexpr int kMaxRanksPerGpu = 8;
inline constexpr int kMaxTokensPerRank = 1 << 20;
// Names, boot ids, NVLink domains: a DNS name's length.
inline constexpr size_t kMaxNameBytes = 253;

// kShared: one for the entry's ranks (a machine, a container run with
// --pid=host, a pod with shareProcessNamespace); kPerRank: a container per
// rank without them (Docker's and Kubernetes' default).
enum class PidNamespaces : uint8_t { kShared, kPerRank };

struct HostSpec {
  std::string name;                 // hostname
  std::string boot_id;              // defaults to a value derived from name
  int gpu_count = 0;                // GPUs (physical); the host runs gpu_count x ranks_per_gpu ranks
  // Ranks that share one GPU: 1 (the default, one GPU each) or, only where
  // written, more (a one-GPU machine running the real multi-process
  // exchange). Placements that run NCCL refuse it (NCCL puts one rank of a
  // communicator on a GPU); each sharing rank gets gpu_memory / ranks_per_gpu.
  int ranks_per_gpu = 1;
  std::string gpu_model = "H200";   // H100, H200, B200, GB200, B300, GB300 (any case)
  uint64_t gpu_memory_bytes = 0;    // 0: the model's CUDA total (core/model/gpu_models.h)
  uint64_t host_memory_bytes = 0;   // system RAM; 0: the model's usual host, per GPU x gpu_count
  bool shm_mounted = true;          // /dev/shm present
  uint64_t tmpfs_bytes_total = 0;   // /dev/shm size
  // shm_size was written (file or flag). Unwritten, a bare_metal host's
  // /dev/shm is the kernel's tmpfs default, half the RAM (Linux
  // Documentation/filesystems/tmpfs.rst, "size": "The default is half of
  // your physical RAM without swap"), set where the RAM is known; other
  // hosts keep Docker's 64 MiB.
  bool shm_size_written = false;
  std::string nvlink_domain;        // "" = no NVLink domain beyond this host
  bool imex_channel = false;        // IMEX channel device present
  bool fabric_attribute = false;    // the driver reports FABRIC handle support
  bool posix_fd_attribute = true;   // the driver reports POSIX fd handle support (the emulator refuses POSIX without it)
  int visible_gpus_per_rank = 0;    // 0 = all; 1 = each container sees one GPU
  RuntimeEnvironment environment = RuntimeEnvironment::kUnknown;  // picks the fixes messages name
  // Containers (what happens after the placement; the placement itself
  // reads only tmpfs_bytes_total). 0 = not limited.
  // Limits as written; unset: none. An explicit 0B is a limit of nothing.
  std::optional<uint64_t> tmpfs_bytes_enforced;         // a smaller limit the tmpfs total does not show (Kubernetes emptyDir sizeLimit)
  std::optional<uint64_t> memory_limit_bytes_per_rank;  // each rank's memory cgroup; /dev/shm pages count against their writer's
  // The container's or pod's memory limit over every rank of this entry
  // (docker --memory, a pod's resources.limits.memory): their host tables,
  // the /dev/shm pages they write, their pinned staging, together.
  std::optional<uint64_t> memory_limit_bytes;
  // /dev/shm bytes other processes already hold. The placement reads the
  // total, never the free space (every rank of a node decides alike), and
  // the memory fit counts only the job's own tables, so a fill meets these
  // (ENOSPC, a sizeLimit, the RAM) where it writes.
  uint64_t tmpfs_bytes_used = 0;
  int cpu_sockets = 1;                       // NUMA nodes; which GPU sits on which: gpu_numa_node()
  // The PID namespaces its ranks run in. SGLang's shared host table opens a
  // peer's memfd through /proc/<pid>/fd, which resolves only inside the
  // creator's PID namespace.
  PidNamespaces pid_namespaces = PidNamespaces::kShared;
};

// The ranks a host runs: one per GPU, or ranks_per_gpu on each.
inline int rank_slots(const HostSpec& host) { return host.gpu_count * host.ranks_per_gpu; }
// The NUMA node (CPU socket) of GPU `gpu` of this host: GPU g of G sits on
// socket g * sockets / G, the even split of a dual-socket HGX or NVL72 tray.
// One rule for the plan (SGLang's per-NUMA-node copies) and the emulator's
// hosts; a real rank reads its GPU's sysfs numa_node instead (HostProbe).
inline int gpu_numa_node(const HostSpec& host, int gpu) {
  return gpu * (host.cpu_sockets < 1 ? 1 : host.cpu_sockets) / (host.gpu_count < 1 ? 1 : host.gpu_count);
}
// This rank's share of its GPU's memory.
inline uint64_t gpu_memory_share_bytes(const HostSpec& host) {
  return host.gpu_memory_bytes / static_cast<uint64_t>(host.ranks_per_gpu < 1 ? 1 : host.ranks_per_gpu);
}

// How long a rank waits for its peers before it gives up (the engine's
// watchdog / rendezvous deadlines; the real backend's defaults).
struct Timeouts {
  uint64_t collective_ms = 60000;  // every member reaches one collective (also an fd from a peer)
  uint64_t join_ms = 30000;        // every member reaches the rendezvous or a group split
};

// The engine's parallel layout. World = tp * dp ranks; rank = dp_rank * tp + tp_rank.
struct ParallelLayout {
  int tp = 1;          // attention TP ranks per replica
  int dp = 1;          // DP replicas
  int ep = 1;          // expert parallel size (informational; checked to divide world)
  bool elastic_ep = false;
  int prefill_cp = 1;  // prefill context parallel size (same per-token rule)
  // Ranks the engine's world holds beyond tp x dp (e.g. ranks of other
  // parallel groups on the same nodes): they hold no Engram table, but an
  // engine that sizes its node-local group from the whole world (vLLM's
  // _engram_dp_shard_size) counts them. They fill the hosts' slots after the
  // Engram ranks, in host order.
  int extra_ranks = 0;
  int world_size() const { return tp * dp; }
  bool operator==(const ParallelLayout&) const = default;
};

// Which ranks share one row-sharded device table.
// kReplica: the TP ranks of one DP replica.
// kEngramDp: every TP rank of the replicas of one node-local Engram DP
// group, TP-major (vLLM's device tables are cut over it unless
// embedding_across_dp; core/engines/vllm_profile.cc).
enum class ShardGroup : uint8_t { kWorld, kNvlinkDomain, kHost, kReplica, kEngramDp };

struct EngramConfig {
  bool cpu_offload = false;
  bool peer_shards = false;                 // opt-in device_peer
  std::optional<bool> dp_shared_memory;     // unset | true | false
  ShardGroup shard_group = ShardGroup::kWorld;
  int tokens_per_rank_max = 1024;           // DP slot size for the collective buffer
  // Sequence parallelism (only above TP1): each TP rank of a replica gets
  // back its own token shard, ceil(tokens / tp) tokens zero-padded, instead
  // of every token's heads.
  bool sequence_parallel = false;
  // A registered placement's name forcing it on every rank (as written:
  // validated against the registry when the deployment is read); empty:
  // the rules of docs/design.md section 3 decide.
  std::string placement;
  // cpu_offload was written (file or flag); unwritten, the engine's default
  // applies (vLLM: on; core/engines/).
  bool cpu_offload_given = false;
  // Engine-specific settings; an engine without them refuses them by name.
  bool embedding_across_dp = false;  // vLLM: device head shards over TP x DP
  bool thp_packing = false;          // vLLM: host tables packed in huge pages (needs cpu_offload)
  // The engine's host layout by its own name (core/engines/: each engine
  // lists its own); empty: the engine's default.
  std::string host_layout;
  bool operator==(const EngramConfig&) const = default;
};

// What the engine itself takes from each GPU, so "KV cache left" is what the
// KV cache really gets: GPU memory x gpu_memory_fraction (the engine's
// budget: vLLM's gpu_memory_utilization, SGLang's mem_fraction_static), less
// the Engram tables and buffer, less gpu_reserved_bytes (weights,
// activations, CUDA context, NCCL buffers).
inline constexpr int kMaxContextLength = 1 << 30;

struct EngineMemory {
  double gpu_memory_fraction = 0.90;          // vLLM's default gpu_memory_utilization
  std::optional<uint64_t> gpu_reserved_bytes;  // unset: the model's weights at this TP if its file gives them, else not counted
  bool reserved_from_model = false;            // gpu_reserved_bytes came from the model file's serving figures
  bool fraction_given = false;                 // false: the default above, announced
  // Tokens per request for "maximum concurrency" (vLLM's max_model_len);
  // unset: the plan gives KV tokens only.
  std::optional<int64_t> context_length_tokens;
  // Nothing left for the KV cache is refused (the engine could not start)
  // unless the user accepts it (engine.allow_negative_kv, --allow-negative-kv):
  // then it is a warning, e.g. where the engine's budget is set elsewhere.
  bool negative_kv_allowed = false;
  // Whose rules plan this deployment (engine.name, --engine).
  EngineId profile = EngineId::kEngramlab;
  // A named variant of it (`--engine vllm+sp-all-to-all`: "sp-all-to-all");
  // empty: the engine's main (core/engines/engine_profile.h).
  std::string variant;
  bool operator==(const EngineMemory&) const = default;
};

// A default the user did not write, as the output announces it.
struct DefaultUsed {
  std::string field;   // "hosts[0].gpu_memory", "engine.gpu_memory_fraction"
  std::string value;   // "139.80 GiB"
  std::string source;  // where the figure comes from and how to override it
};

struct Deployment {
  std::string model = "deepseek-v4.1-flash";
  HashOverrides model_hash;     // token-space settings over the preset (model: {name: ..., pad_id: ...})
  std::vector<HostSpec> hosts;
  std::vector<int> rank_hosts;  // rank -> index into hosts; empty = fill hosts in order
  ParallelLayout layout;
  EngramConfig config;
  EngineMemory engine;
  std::vector<DefaultUsed> defaults_used;  // filled by whoever applies a default
  Timeouts timeouts;
};

}  // namespace engram
