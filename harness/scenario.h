// A scenario file (docs/design.md section 7): a deployment (topology, layout,
// config), a seed, a fault plan, the lookup check and the expectations a run
// must meet. This is the data model and its YAML parser; running one lives in
// harness/emulated_scenario.h (core never includes sim).
//
//   name: dep4-docker-default-shm          # optional; default: the file name
//   description: ...                       # optional
//   model: deepseek-v4.1-flash             # the deployment fields, top level,
//   hosts: [...]                           # exactly as in core/deployment_file/deployment_yaml.h
//   rank_hosts: [...]
//   layout: {tp: 1, dp: 4}
//   config: {cpu_offload: true}
//   seed: 7
//   faults:
//     planned: [{site: import, rank: 2, occurrence: 1}, {site: rank_death, rank: 1, at: collective},
//               {site: slow, rank: 3, at: shm_write, delay_ms: 90000},
//               {site: slow, rank: 2, link_factor: 2}]   # its links twice as slow from then on (no stall)
//     rates: {send: 0.1}
//     slow_delay_ms: 15000                 # a slow fault's stall where its entry names none (rates)
//   # or `faults: drawn`: the seed draws the faults (site, rank, when), the
//   # interleaving and the timeouts the file leaves open, as `fuzz --file`
//   # does; such a file has no `expect:` (the swarm's rules are checked) and
//   # `scenario run --emit FILE` writes the drawn case out as a scenario
//   # with the outcome seen as its expectation.
//   lookup: {model: tiny, tokens: 8, run: true}   # or batches: [{tokens: [8, 8]}, {tokens: [7, 0], dead: [1]}]
//   # or requests and steps (harness/lookup_steps.h):
//   #   lookup: {model: tiny, requests: [{instance: 0}], steps: [{prefill: [6]}, {decode: [0]}]}
//   expect:
//     placement: host_head_sharded         # or [{ranks: 0-3, placement: ...}, ...]
//     warnings: ["188.8 GiB", "--shm-size"] # [] = no warning allowed; absent = not checked
//     error: {kind: failed_precondition, contains: [IMEX], rank: 0, step: import}
//     memory: {hbm_per_gpu: 47.2GiB, host_per_node: 188.8GiB, host_per_rank: 47.2GiB, copies_per_node: 1}
//     handle_type: fabric                # or per shard group: [fabric, posix_fd] or {1: posix_fd}
//     lookup_equal: true
//     ids_equal_whole: true                # ids across steps / CP ranks = the accepted sequence's hashed whole
//     faults_fired: [import]
//     shm_remote_numa_maps: 8              # host-table maps read across sockets
//     step_time_us_max: 12.5               # every rank's slowest lookup step (the step model's time)
//     # or {p50: 8, max: 12.5}, or [{ranks: 0-2, max: 8}, {ranks: 3, p50: 15, max: 16}]
//     no_leaks: true                       # always checked; false is refused
//
// Every error is invalid_argument "<source>: line L, column C: <field>:
// <problem and fix>".
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend/device_memory.h"
#include "core/deployment/deployment.h"
#include "core/placements/placement.h"
#include "core/base/status.h"
#include "harness/lookup_steps.h"

namespace engram::harness {

struct ScenarioFault {
  std::string site;    // a fault site (sim/faults.h)
  int rank = 0;
  int occurrence = 1;  // 1 = the rank's first visit of the site
  std::string at;      // process faults only: the checkpoint ("import", "collective", ...); "" = any
  uint64_t delay_ms = 0;  // slow only: the stall; 0 = the emulator's default (none with a factor below)
  // slow only: from the checkpoint on, the rank's links / GPU this many
  // times slower in its lookup steps' model time (1 = as modelled).
  double link_factor = 1.0;
  double gpu_factor = 1.0;
};

struct ScenarioFaultRate {
  std::string site;
  double probability = 0.0;
};

// One step of lookups: tokens per DP replica (every TP rank of a replica
// brings the replica's ids), and replicas whose ids are all DEAD.
struct ScenarioBatch {
  std::vector<int> tokens_by_replica;
  std::vector<int> dead_replicas;
};

// A scenario's lookup check builds its model's whole tables in memory on
// every emulated rank that holds them: test-sized models only.
inline constexpr uint64_t kMaxLookupModelBytes = uint64_t{64} << 20;

struct ScenarioLookup {
  bool run = true;
  std::string model = "tiny";  // the table model really built and looked up (at most kMaxLookupModelBytes)
  HashOverrides model_hash;    // its token-space settings over the preset (model: {name: tiny, pad_id: 5})
  int tokens = 4;              // per replica (every fourth replica brings none: an idle one)
  // Steps looked up in turn (vLLM's test matrix: [8,8,8,8], [7,0,5,1], then
  // [7,7,7,7] with replica 1 all DEAD); empty: one step of `tokens`. With
  // layout.prefill_cp above 1 a CP group's replicas hold one sequence, a
  // shard each (their token counts), hashed after the halos.
  std::vector<ScenarioBatch> batches;
  // Requests and the steps they take (harness/lookup_steps.h), instead of
  // tokens and batches: ids hashed across steps by a request hasher.
  LookupSteps steps;
};

struct ExpectedPlacement {
  int first_rank = 0;
  int last_rank = -1;  // inclusive; -1 = through the last rank
  Placement placement = Placement::kDeviceCollective;
};

struct ExpectedError {
  ErrorCode kind = ErrorCode::kInternal;
  std::vector<std::string> contains;  // each must appear in the message
  std::optional<int> rank;
  std::optional<std::string> step;
};

// A size as written ("47.2GiB"): it matches an actual size that rounds to it,
// i.e. within half a unit of its last written digit.
struct ExpectedSize {
  std::string text;
  uint64_t bytes = 0;
  uint64_t tolerance_bytes = 0;
  bool matches(uint64_t actual) const;
};

// expect.step_time_us_max, one entry per rank range: bounds on the model's
// time of each rank's own lookup steps (sim/sim_step_clock.h; waiting on
// peers not counted): their p50 (lower median) and/or their max.
struct ExpectedStepTime {
  int first_rank = 0;
  int last_rank = -1;  // inclusive; -1 = through the last rank
  std::optional<double> p50_us;
  std::optional<double> max_us;
};

struct ScenarioExpect {
  std::vector<ExpectedPlacement> placements;       // empty: not checked
  std::optional<std::vector<std::string>> warnings;  // absent: not checked; empty: none allowed
  std::optional<ExpectedError> error;               // absent: every rank must succeed
  std::optional<ExpectedSize> hbm_per_gpu;          // plan: tables + buffer on the busiest GPU
  std::optional<ExpectedSize> host_per_node;        // plan: Engram table bytes in the busiest host's memory
  std::optional<ExpectedSize> host_per_rank;        // plan: the most host table bytes one rank holds or maps
  std::optional<int> copies_per_node;               // plan: whole table sets in the busiest host's memory
  std::optional<HandleType> handle_type;            // every device_peer group's
  // List form (one per shard group, in group order; the count checked) or
  // map form (group index -> type, only those groups checked).
  std::map<int, HandleType> handle_types_by_group;
  bool handle_types_every_group = false;            // the list form
  bool lookup_equal = false;                        // lookups must run, succeed and equal the direct lookup
  // The ids hashed across steps or CP ranks must have been checked against
  // the accepted sequence hashed whole, on every rank that ran (any
  // difference fails a scenario even without this field).
  bool ids_equal_whole = false;
  std::vector<std::string> faults_fired;            // each site must have fired at least once
  // Read-only maps of a host table by ranks on another socket than its one
  // copy (emulator only: the copy lives on its writer's NUMA node).
  std::optional<uint64_t> shm_remote_numa_maps;
  std::vector<ExpectedStepTime> step_time_us_max;   // empty: not checked
};

struct Scenario {
  std::string name;
  std::string description;
  std::string source;  // file path (or the name given to parse_scenario_text)
  std::string source_text;  // the file as read, once (set by load_scenario_file; emitted scenarios copy its words)
  Deployment deployment;
  uint64_t seed = 1;
  std::vector<ScenarioFault> planned_faults;
  std::vector<ScenarioFaultRate> fault_rates;
  std::optional<uint64_t> slow_delay_ms;  // absent: the emulator's default
  bool faults_drawn = false;              // `faults: drawn`: the seed draws them; no expect
  ScenarioLookup lookup;
  ScenarioExpect expect;
};

Result<Scenario> parse_scenario(const YAML::Node& root, std::string_view source_name);
Result<Scenario> parse_scenario_text(std::string_view text, std::string_view source_name);
Result<Scenario> load_scenario_file(const std::string& path);

struct ScenarioFiles {
  std::vector<std::string> files;    // sorted
  std::vector<std::string> skipped;  // "'<path>': <why>; skipped", for *.yaml entries that are not readable files
};

// Files named *.yaml / *.yml directly in `path` (a directory), or `path`
// itself when it is a file. An entry that is a symlink loop, a dangling link
// or not a regular file is skipped and named, never an abort.
Result<ScenarioFiles> scenario_files(const std::string& path);

// "0-3" or "5" -> [first, last]; errors name the text.
Result<std::pair<int, int>> parse_rank_range(std::string_view text);

}  // namespace engram::harness
