#include "core/deployment/cp_groups.h"

#include <fmt/format.h>

namespace engram {

Status check_prefill_cp(const ParallelLayout& layout) {
  if (layout.prefill_cp < 1)
    return invalid_argument(fmt::format("layout.prefill_cp: {} must be at least 1", layout.prefill_cp));
  if (layout.dp % layout.prefill_cp != 0)
    return invalid_argument(fmt::format(
        "layout.prefill_cp: {} does not divide layout.dp = {}: a context-parallel group is prefill_cp consecutive DP "
        "replicas (as SGLang's attention CP group), so choose a prefill_cp that divides dp ({}), or a dp that "
        "prefill_cp divides",
        layout.prefill_cp, layout.dp, [&] {
          std::string divisors;
          for (int d = 1; d <= layout.dp; ++d)
            if (layout.dp % d == 0) divisors += fmt::format("{}{}", divisors.empty() ? "" : ", ", d);
          return divisors;
        }()));
  return Status::ok();
}

int cp_group_count(const ParallelLayout& layout) {
  ENGRAM_CHECK(layout.prefill_cp >= 1 && layout.dp % layout.prefill_cp == 0);
  return layout.world_size() / layout.prefill_cp;
}

CpGroup cp_group_of(const ParallelLayout& layout, int world_rank) {
  ENGRAM_CHECK(layout.prefill_cp >= 1 && layout.dp % layout.prefill_cp == 0);
  ENGRAM_CHECK(world_rank >= 0 && world_rank < layout.world_size());
  const int replica = world_rank / layout.tp;
  const int tp_rank = world_rank % layout.tp;
  const int block = replica / layout.prefill_cp;
  CpGroup g;
  g.index = block * layout.tp + tp_rank;
  g.cp_rank = replica % layout.prefill_cp;
  for (int c = 0; c < layout.prefill_cp; ++c)
    g.world_ranks.push_back((block * layout.prefill_cp + c) * layout.tp + tp_rank);
  ENGRAM_CHECK(g.world_ranks[static_cast<size_t>(g.cp_rank)] == world_rank);
  return g;
}

}  // namespace engram
