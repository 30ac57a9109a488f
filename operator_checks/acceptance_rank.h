// `engramlab acceptance`, one rank: the engines' manual acceptance test as
// one command. The rank builds its tables through the runtime (at real size
// on a cluster), then for each table and token count looks up ids on its
// device (random rows, DEAD, out-of-table ids and rows holding -0 and NaN
// codes) eagerly and under graph replay, checks sampled slots against the
// CPU reference of the table fill, checks device_peer against the
// collective over the same shards on every slot, and times the replays.
// Then a decode loop (operator_checks/acceptance_decode_loop.h): ids hashed
// by the device request hasher and looked up in one graph replayed across
// steps, checked against the CPU RequestHasher and the CPU reference.
//
// The same body runs on real processes (apps/acceptance_command.cc, under a
// launcher) and on the emulator (tests), as scenario ranks do.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/backend/rank_backend.h"
#include "core/base/status.h"
#include "core/base/warnings.h"
#include "core/runtime/engram_runtime.h"
#include "operator_checks/acceptance_decode_loop.h"

namespace engram::operator_checks {

struct AcceptanceOptions {
  RuntimeOptions runtime;            // its config.tokens_per_rank_max is raised to the largest token count
  std::vector<int> token_counts = {1, 64, 1024, 8192};
  int sampled_slots = 256;           // slots per (table, token count) checked against the CPU reference
  int warmup_replays = 5;
  int timed_replays = 50;
  uint64_t ids_seed = 1;
  // The decode loop (0 steps: none); its bucket raises tokens_per_rank_max too.
  int decode_steps = 16;
  int decode_requests = 4;
  int decode_bucket_tokens = 32;
};

// One (table, token count) of one rank.
struct AcceptanceRow {
  int table_index = 0;
  int layer_id = 0;
  int tokens = 0;
  int64_t slots = 0;                 // tokens x heads
  int64_t slots_checked = 0;         // against the CPU reference (sampled and every special slot)
  bool cross_checked = false;        // device_peer: the collective path compared on every slot
  double latency_us_p10 = 0, latency_us_p50 = 0, latency_us_p90 = 0;  // graph replays
  std::vector<std::string> mismatches;  // empty: every check held
};

struct AcceptanceReport {
  int rank = 0;
  Placement placement = Placement::kDeviceCollective;
  double build_seconds = 0;          // EngramRuntime::start: groups, exchange, table fill
  double host_fill_seconds = 0;      // within it, host tables: rows filled (RuntimeFacts)
  double device_register_seconds = 0;  // and registered with the device
  // device_peer without its collective cross-check (ranks share a GPU, and
  // NCCL cannot run there): every slot is checked against the CPU reference.
  bool every_slot_vs_cpu = false;
  uint64_t device_bytes = 0;                // this rank's VMM allocations (its shard, at real size)
  std::optional<HandleType> handle_type;    // device_peer: what its group agreed on
  std::vector<AcceptanceRow> rows;
  DecodeLoopReport decode;
  bool passed() const;
};

// Errors: failed_precondition without a DeviceCompute (the rank opened no
// GPU), invalid_argument for options, and whatever the runtime returns.
// Mismatches are not errors: they are in the report.
Status run_acceptance_rank(RankBackend& backend, AcceptanceOptions options, WarningSink& sink,
                           AcceptanceReport& report);

// "rank 0 device_peer layer 1 tokens 1024: ok, 160 of 8192 slots vs CPU, every slot vs collective,
// p10/p50/p90 41.2/42.0/43.9 us" (or the mismatches).
std::string format_acceptance_row(const AcceptanceReport& report, const AcceptanceRow& row);

}  // namespace engram::operator_checks
