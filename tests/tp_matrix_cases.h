// vLLM's Engram test matrix (tests/distributed/test_engram_dp_shard.py) as
// scenario files: (tp, dp, sequence parallel) in {(1, 4, no), (2, 2, no),
// (2, 2, yes)} x heads {8, 7} x the three host placements, cpu_offload on,
// token counts per replica (8, 8, 8, 8), (7, 0, 5, 1) and (7, 7, 7, 7) with
// replica 1 all DEAD in the last step. The emulator test and the real
// processes' test run the same texts. tp_matrix_cases_of_engine gives the
// same matrix planned by an engine's profile (engine: {name: ...}), with the
// placements that engine builds.
#pragma once

#include <fmt/format.h>

#include <string>
#include <vector>

namespace engram::testing {

// vLLM's _token_counts(dp) as a scenario's batches: even loads, then uneven
// ones with an idle replica, then 7 each with replica 1 all DEAD (where
// there is a replica 1).
inline std::string dp_matrix_batches(int dp) {
  const int uneven[] = {7, 0, 5, 1};
  std::string even, second, last;
  for (int d = 0; d < dp; ++d) {
    even += fmt::format("{}8", d ? ", " : "");
    second += fmt::format("{}{}", d ? ", " : "", uneven[d]);
    last += fmt::format("{}7", d ? ", " : "");
  }
  const std::string dead = dp > 1 ? ", dead: [1]" : "";
  return fmt::format("[{{tokens: [{}]}}, {{tokens: [{}]}}, {{tokens: [{}]{}}}]", even, second, last, dead);
}

struct TpMatrixCase {
  int tp = 1;
  int dp = 4;
  bool sequence_parallel = false;
  int heads = 8;
  std::string placement;  // host_private, host_shared or host_head_sharded
  std::string tmpfs;      // the /dev/shm size that gives the placement ("190GiB", "64MiB")
  std::string engine;     // "": no engine section (engramlab)
  // The config beyond sequence_parallel, e.g. "cpu_offload: true, dp_shared_memory: false".
  std::string config = "cpu_offload: true";
  // Plan with the lookup's own tiny model instead of V4.1 (a copy per GPU
  // of device tables fits only so).
  bool plan_with_lookup_model = false;

  std::string name() const {
    return fmt::format("{}{}tp{}_dp{}{}_{}h_{}", engine, engine.empty() ? "" : "_", tp, dp,
                       sequence_parallel ? "_sp" : "", heads, placement);
  }
  std::string batches() const { return dp_matrix_batches(dp); }
  std::string scenario_text() const {
    return fmt::format(
        "description: vLLM's Engram DP-shard matrix, {name}\n"
        "hosts:\n"
        "  - {{name: h200-0, gpus: 4, gpu_model: H200, shm_size: {tmpfs}}}\n"
        "layout: {{tp: {tp}, dp: {dp}}}\n"
        "config: {{{config}, sequence_parallel: {sp}}}\n"
        "{engine}"
        "{model}"
        "seed: {seed}\n"
        "lookup: {{model: tiny-{heads}h, batches: {batches}}}\n"
        "expect:\n"
        "  placement: {placement}\n"
        "  lookup_equal: true\n",
        fmt::arg("name", name()), fmt::arg("tmpfs", tmpfs), fmt::arg("tp", tp), fmt::arg("dp", dp),
        fmt::arg("sp", sequence_parallel ? "true" : "false"),
        fmt::arg("config", config), fmt::arg("engine", engine.empty() ? "" : "engine: {name: " + engine + "}\n"),
        fmt::arg("seed", 100 + tp * 10 + heads), fmt::arg("heads", heads), fmt::arg("batches", batches()),
        fmt::arg("placement", placement),
        fmt::arg("model", plan_with_lookup_model ? fmt::format("model: tiny-{}h\n", heads) : std::string()));
  }
};

inline std::vector<TpMatrixCase> tp_matrix_cases() {
  struct Layout {
    int tp, dp;
    bool sp;
  };
  const Layout layouts[] = {{1, 4, false}, {2, 2, false}, {2, 2, true}};
  struct Where {
    const char* placement;
    const char* tmpfs;
  };
  const Where wheres[] = {{"host_private", "190GiB"}, {"host_shared", "190GiB"}, {"host_head_sharded", "64MiB"}};
  std::vector<TpMatrixCase> out;
  for (const Layout& l : layouts)
    for (int heads : {8, 7})
      for (const Where& w : wheres)
        out.push_back({l.tp, l.dp, l.sp, heads, w.placement, w.tmpfs, "",
                       std::string("cpu_offload: true") +
                           (std::string(w.placement) == "host_private" ? ", dp_shared_memory: false" : "")});
  return out;
}

// One engine's matrix: its placements, each with the config that asks for it
// (`where`: placement, /dev/shm size, config).
struct EngineWhere {
  const char* placement;
  const char* tmpfs;
  const char* config;
};
inline std::vector<TpMatrixCase> tp_matrix_cases_of_engine(const std::string& engine,
                                                           const std::vector<EngineWhere>& wheres) {
  std::vector<TpMatrixCase> out;
  for (const TpMatrixCase& c : tp_matrix_cases()) {
    if (c.placement != "host_shared") continue;  // one case per layout and head count
    for (const EngineWhere& w : wheres) {
      TpMatrixCase e = c;
      e.placement = w.placement;
      e.tmpfs = w.tmpfs;
      e.config = w.config;
      e.engine = engine;
      out.push_back(e);
    }
  }
  return out;
}

}  // namespace engram::testing
