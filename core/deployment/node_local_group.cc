#include "core/deployment/node_local_group.h"

#include "core/base/status.h"

namespace engram {

NodeLocalGroups compute_node_local_groups(const ParallelLayout& layout, std::span<const int> rank_hosts,
                                          int host_count) {
  const int tp = layout.tp;
  const int world = layout.world_size();
  ENGRAM_CHECK(tp >= 1 && layout.dp >= 1);
  ENGRAM_CHECK(static_cast<int>(rank_hosts.size()) == world);
  ENGRAM_CHECK(host_count >= 1);

  NodeLocalGroups out;
  out.host_misaligned.assign(static_cast<size_t>(host_count), false);
  auto host_of = [&](int rank) {
    int h = rank_hosts[static_cast<size_t>(rank)];
    ENGRAM_CHECK(h >= 0 && h < host_count);
    return h;
  };
  // A replica (tp consecutive ranks) on more than one host taints them all.
  for (int d = 0; d < layout.dp; ++d) {
    const int first = host_of(d * tp);
    bool straddles = false;
    for (int t = 1; t < tp; ++t) straddles |= host_of(d * tp + t) != first;
    if (!straddles) continue;
    for (int t = 0; t < tp; ++t) out.host_misaligned[static_cast<size_t>(host_of(d * tp + t))] = true;
  }

  out.group_by_rank.assign(static_cast<size_t>(world), -1);
  out.size_by_rank.assign(static_cast<size_t>(world), 0);
  out.index_by_rank.assign(static_cast<size_t>(world), 0);
  // Group key (host, tp_rank) -> id; sizes counted as members arrive, in DP order.
  std::vector<int> key_group(static_cast<size_t>(host_count) * static_cast<size_t>(tp), -1);
  std::vector<int> group_size;
  for (int r = 0; r < world; ++r) {
    const int h = host_of(r);
    int g;
    if (out.host_misaligned[static_cast<size_t>(h)]) {
      g = static_cast<int>(group_size.size());
      group_size.push_back(0);
    } else {
      int& slot = key_group[static_cast<size_t>(h) * static_cast<size_t>(tp) + static_cast<size_t>(r % tp)];
      if (slot < 0) {
        slot = static_cast<int>(group_size.size());
        group_size.push_back(0);
      }
      g = slot;
    }
    out.group_by_rank[static_cast<size_t>(r)] = g;
    out.index_by_rank[static_cast<size_t>(r)] = group_size[static_cast<size_t>(g)]++;
  }
  for (int r = 0; r < world; ++r)
    out.size_by_rank[static_cast<size_t>(r)] = group_size[static_cast<size_t>(out.group_by_rank[static_cast<size_t>(r)])];
  out.group_count = static_cast<int>(group_size.size());
  return out;
}

}  // namespace engram
