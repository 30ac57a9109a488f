#include "core/plan/memory_margins.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/base/size_text.h"
#include "core/base/text_list.h"
#include "core/plan/memory_fit.h"

namespace engram {
namespace {

int64_t headroom(uint64_t limit, uint64_t charged) {
  return static_cast<int64_t>(limit) - static_cast<int64_t>(charged);  // both at most 1 EiB
}

std::string ranks_of_host(const PlanResult& plan, int host) {
  std::vector<int> ranks;
  for (const RankPlan& r : plan.ranks)
    if (r.host == host) ranks.push_back(r.rank);
  return compress_ranges(ranks);
}

// What a limit is charged with, by kind: "host tables X + /dev/shm copy Y + pinned staging Z".
std::string charge_text(uint64_t host_tables, uint64_t shm, uint64_t pinned) {
  std::vector<std::string> parts;
  if (host_tables) parts.push_back("host tables " + format_size_short(host_tables));
  if (shm) parts.push_back("/dev/shm copy " + format_size_short(shm));
  if (pinned) parts.push_back("pinned staging " + format_size_short(pinned));
  if (parts.empty()) return "nothing of Engram's";
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : " + ") + p;
  return out;
}

}  // namespace

std::vector<MemoryMargin> memory_margins(const PlanResult& plan) {
  std::vector<MemoryMargin> out;
  for (const HostMemory& h : plan.hosts) {
    const HostSpec& host = plan.deployment.hosts[static_cast<size_t>(h.host)];
    const std::string scope = fmt::format("host {}, ranks {}", h.name, ranks_of_host(plan, h.host));
    if (h.host_memory_bytes != 0 && h.host_table_bytes != 0) {
      out.push_back({"RAM", scope, h.host_memory_bytes, h.host_table_bytes,
                     host_tables_text(h.table_copies) + " " + format_size_short(h.host_table_bytes),
                     headroom(h.host_memory_bytes, h.host_table_bytes),
                     kHostHeadroomFloorBytesPerRank * static_cast<uint64_t>(h.rank_count), h.rank_count});
    }
    if (h.shm_bytes != 0) {
      const bool enforced = host.tmpfs_bytes_enforced && *host.tmpfs_bytes_enforced < host.tmpfs_bytes_total;
      const uint64_t limit = enforced ? *host.tmpfs_bytes_enforced : host.tmpfs_bytes_total;
      out.push_back({enforced ? "shm_size_limit (sizeLimit)" : "/dev/shm", scope, limit, h.shm_bytes,
                     "the node's copy " + format_size_short(h.shm_bytes), headroom(limit, h.shm_bytes),
                     kShmHeadroomFloorBytesPerNode, h.rank_count});
    }
  }
  for (const MemoryLimitScope& s : plan.memory_limits) {
    uint64_t tables = 0, shm = 0, pinned = 0;
    for (int r : s.ranks) {
      const RankMemory& m = plan.ranks[static_cast<size_t>(r)].memory;
      tables += m.host_private_bytes;
      shm += m.shm_written_bytes;
      pinned += m.host_pinned_bytes;
    }
    const HostSpec& host = plan.deployment.hosts[static_cast<size_t>(s.host)];
    const bool per_rank = s.ranks.size() == 1 && host.memory_limit_bytes_per_rank &&
                          *host.memory_limit_bytes_per_rank == s.limit_bytes && !host.memory_limit_bytes;
    const uint64_t charged = tables + shm + pinned;
    const int ranks = static_cast<int>(s.ranks.size());
    out.push_back({per_rank ? "memory_limit_per_rank" : "memory_limit",
                   fmt::format("host {}, rank{} {}", host.name, ranks == 1 ? "" : "s", compress_ranges(s.ranks)),
                   s.limit_bytes, charged, charge_text(tables, shm, pinned), headroom(s.limit_bytes, charged),
                   kHostHeadroomFloorBytesPerRank * static_cast<uint64_t>(ranks), ranks});
  }
  return out;
}

std::vector<std::string> memory_not_counted(const PlanResult& plan) {
  std::vector<std::string> out;
  out.push_back(fmt::format("the engine's own processes in host memory (Python, torch, CUDA context, NCCL's host "
                            "buffers: left to a headroom floor of {} a rank)",
                            format_size_short(kHostHeadroomFloorBytesPerRank)));
  out.push_back(fmt::format("NCCL's and the engine's own /dev/shm segments (left to a floor of {} a node)",
                            format_size_short(kShmHeadroomFloorBytesPerNode)));
  const EngineMemory& engine = plan.deployment.engine;
  if (!engine.gpu_reserved_bytes)
    out.push_back(fmt::format("the model's weights, activations and the CUDA context on each GPU: model {} has no "
                              "serving figures, so \"KV cache left\" is before them (give --gpu-reserved, "
                              "engine.gpu_reserved)",
                              plan.deployment.model));
  // Hook: an engine profile that states what it holds beside the tables
  // (core/engines/) adds its lines here.
  return out;
}

void add_memory_margin_warnings(PlanResult& plan) {
  std::vector<std::string> low;
  for (const MemoryMargin& m : memory_margins(plan)) {
    if (m.headroom_bytes < 0 || static_cast<uint64_t>(m.headroom_bytes) >= m.floor_bytes) continue;
    low.push_back(fmt::format("{} {} of {}: {} charged, {} left, below the floor of {}", m.scope, m.limit,
                              format_size_short(m.limit_bytes), format_size_short(m.charged_bytes),
                              format_size_short(static_cast<uint64_t>(m.headroom_bytes)),
                              format_size_short(m.floor_bytes)));
  }
  if (!low.empty()) {
    append_unique(plan.warnings,
                  Warning{"memory.headroom_low",
                          fmt::format("{}; the engine's processes (and NCCL's /dev/shm) live in that headroom and are "
                                      "not counted: raise the limit to what is charged plus the floor",
                                      fmt::join(low, "; "))});
  }
  const EngineMemory& engine = plan.deployment.engine;
  if (engine.context_length_tokens && plan.model.kv_bytes_per_token == 0) {
    append_unique(plan.warnings,
                  Warning{"plan.context_length_unused",
                          fmt::format("--context-length {} is not used: model {} gives no KV bytes per token "
                                      "(serving.kv_bytes_per_token), so no concurrency can be counted; give a model "
                                      "file with its serving: figures",
                                      *engine.context_length_tokens, plan.deployment.model)});
  }
}

}  // namespace engram
