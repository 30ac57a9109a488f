#include "harness/emulator_memory.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "backends/shm/memory_cgroup.h"
#include "core/base/units.h"
#include "sim/paged_bytes.h"

namespace engram::harness {
namespace {

// The most tokens one replica looks up in one step.
int max_lookup_tokens(const ScenarioLookup& lookup) {
  if (!lookup.run) return 0;
  if (lookup.batches.empty()) return std::max(lookup.tokens, 0);
  int most = 0;
  for (const ScenarioBatch& b : lookup.batches)
    for (int t : b.tokens_by_replica) most = std::max(most, t);
  return most;
}

// "Name:   123 kB" in /proc/self/status or /proc/meminfo, in bytes.
std::optional<uint64_t> proc_kib_field(const char* file, const std::string& name) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(name.size() + 1));
    uint64_t kib = 0;
    if (fields >> kib) return kib * 1024;
    return std::nullopt;
  }
  return std::nullopt;
}

// A halo frame: the lookback ids (at most the longest n-gram, 8) and two
// header words, 8 bytes each (core/lookup/cp_halo.h cp_halo_frame_words).
constexpr uint64_t kHaloFrameBytes = (8 + 2) * 8;

}  // namespace

uint64_t compiled_steps_bytes(const LookupSteps& steps, int prefill_cp) {
  if (steps.drawn) return 1u << 20;  // harness/request_schedule.h: at most 16 steps of a few requests
  const uint64_t cp = static_cast<uint64_t>(std::max(prefill_cp, 1));
  // A shard's vector and a CP rank's part of the op's name; the ids, the
  // lookback and the op itself beside them.
  constexpr uint64_t kShardBytes = 24 + 8;
  constexpr uint64_t kOpBytes = 512;
  uint64_t bytes = 0;
  for (const StepSpec& s : steps.steps) {
    uint64_t ops = 1, tokens = 0;
    if (s.kind == StepKind::kCpPrefill && s.every_split_tokens >= 0) {
      ops = static_cast<uint64_t>(every_split_count(s.every_split_tokens, static_cast<int>(cp)));
      tokens = static_cast<uint64_t>(s.every_split_tokens);
    } else {
      for (int n : s.chunk_tokens) tokens += static_cast<uint64_t>(std::max(n, 0));
      for (int n : s.cp_split) tokens += static_cast<uint64_t>(std::max(n, 0));
      tokens += s.requests.size();
      for (const StepsVerify& v : s.verifies) tokens += static_cast<uint64_t>(1 + std::max(v.drafts, 0));
    }
    const uint64_t per_op = kOpBytes + (s.kind == StepKind::kCpPrefill ? cp * kShardBytes : 0) + tokens * 8 * 2;
    bytes += ops * per_op;
  }
  return bytes + steps.requests.size() * kOpBytes;
}

EmulatorMemoryEstimate estimate_emulator_memory(const Deployment& deployment, const ModelSpec& model,
                                                const ScenarioLookup& lookup, bool any_device_collective,
                                                int ranks_per_table_copy) {
  EmulatorMemoryEstimate e;
  e.ranks = static_cast<int>(deployment.rank_hosts.size());
  if (e.ranks == 0) e.ranks = deployment.layout.tp * deployment.layout.dp;
  e.lookup_tokens = max_lookup_tokens(lookup);
  uint64_t heads = 0, dim = 0;
  for (const TableSpec& t : model.tables) {
    heads = std::max<uint64_t>(heads, static_cast<uint64_t>(t.head_count()));
    dim = std::max<uint64_t>(dim, static_cast<uint64_t>(t.dim));
  }
  const uint64_t tokens = static_cast<uint64_t>(e.lookup_tokens);
  // The DP slot the runtime sizes its buffers by (EngramRuntime: at least 1).
  const uint64_t slot = std::max<uint64_t>({1, static_cast<uint64_t>(std::max(deployment.config.tokens_per_rank_max, 0)), tokens});
  const uint64_t group = static_cast<uint64_t>(e.ranks);  // the largest collective group: the world
  const uint64_t tables_bytes = model.table_bytes_total();

  // Terms per rank, each where it is allocated:
  // harness/scenario_rank.cc, one table at a time (each step's vectors die
  // before the next table): the hashed ids, the lookup output `got`, the
  // device's read of a host table `on_device`, the reference `every_token`
  // and `want`: four outputs of tokens x heads x dim bf16.
  const uint64_t output = tokens * heads * dim * 2;
  const uint64_t ids = tokens * heads * 8;
  uint64_t lookup_buffers = 4 * output + ids;
  // core/lookup/lookup_slot.cc: the ids padded to the slot, and the host
  // lookup's staging (HostLookupStaging: the slot's ids and outputs, in
  // emulated device memory whose pages exist once written: the tokens').
  lookup_buffers += slot * heads * 8 + tokens * heads * (8 + dim * 2);
  // Ranks are fibers on one thread: a rank holds these across a switch only
  // when its lookup waits on a collective (device_collective, or ranks
  // sharing a host, whose node-local groups exchange heads). Otherwise one
  // rank at a time holds them (measured: 4,096 tokens, host_head_sharded on
  // one-GPU hosts, peak RSS flat from 8 to 32 ranks).
  std::map<int, int> ranks_per_host;
  int most_on_a_host = 1;
  for (int host : deployment.rank_hosts) most_on_a_host = std::max(most_on_a_host, ++ranks_per_host[host]);
  const bool lookups_overlap = any_device_collective || most_on_a_host > 1;
  uint64_t per_rank = lookups_overlap ? lookup_buffers : 0;
  // The tables the emulator fills: a device placement's shard or replica in
  // the rank's emulated device memory, a host placement's copy per host in
  // emulated /dev/shm; one whole copy of the small model over the fewest
  // ranks that share one (a rank's row shard; a whole copy a rank was 25x
  // the run at 3,456 ranks of 8-GPU hosts).
  per_rank += tables_bytes / static_cast<uint64_t>(std::max(ranks_per_table_copy, 1)) + 4096;
  // sim/: the rank's objects, ledger entries, VMM tables and the touched
  // pages of its fiber stack (sim/world.cc reserves 96 KiB a rank of heap).
  // With the terms below, 4 tokens on 8-GPU hosts measured 77 KB a rank
  // over 128 to 2,048 ranks (tests/emulator_memory_test.cc).
  per_rank += 24 << 10;
  if (any_device_collective) {
    // core/lookup/device_lookup.cc make_collective_workspace, in emulated
    // device memory (sim/paged_bytes.h: pages of kSimPageBytes exist once
    // written): slot_ids is written whole, `mine` in its tokens' rows; the all-gathered ids
    // are one shared extent per group (so one member's share a rank); `rows`
    // (group x slot x heads x dim bf16) is zeroed, which costs nothing, and
    // the gather writes only the owned rows: over the group every looked-up
    // id is owned once, so a rank's share is at most tokens x heads rows,
    // each touching the pages it spans (a page also costs its map entry and
    // allocator header), and never more than the whole buffer. The sparse
    // reduce-scatter (sim/sim_collectives.cc) copies what it sums once more.
    const uint64_t header = heads * 8;  // header tokens' ids, rounded up to a token
    per_rank += (slot * heads * 8 + header) * 2;  // slot_ids, and the share of the gathered ids
    per_rank += tokens * heads * dim * 2;         // mine: the pages of the rank's own tokens are written
    const uint64_t row_bytes = dim * 2;
    const uint64_t pages_per_row =
        row_bytes <= sim::kSimPageBytes && sim::kSimPageBytes % row_bytes == 0 ? 1 : (row_bytes + sim::kSimPageBytes - 1) / sim::kSimPageBytes + 1;
    constexpr uint64_t kPageOverhead = 96;  // unordered_map node, bucket, malloc header
    const uint64_t touched_rows = tokens * heads * pages_per_row * (sim::kSimPageBytes + kPageOverhead);
    const uint64_t whole_rows = group * slot * heads * dim * 2;
    per_rank += 2 * std::min(touched_rows, whole_rows);
  }
  // lookup.steps (harness/lookup_steps.h), compiled once for every rank
  // (harness/emulated_scenario.cc): a CP prefill op holds one shard a CP
  // rank and its name (the split, a few bytes a CP rank); `split: every`
  // expands to every split. Each op's halo exchange (core/lookup/cp_halo.cc)
  // all-gathers a frame from every CP rank into every member at once.
  const uint64_t steps_bytes = compiled_steps_bytes(lookup.steps, deployment.layout.prefill_cp);
  if (steps_bytes > 0) per_rank += static_cast<uint64_t>(std::max(deployment.layout.prefill_cp, 1)) * kHaloFrameBytes;
  // kernels/direct_table_reference.h: the reference tables, built once per
  // model (the rows and their dequantised bf16 values), and slack for the
  // process's allocator. Where lookups do not overlap, the one rank looking
  // up at a time: its vectors above and their copies in emulated device
  // memory (1 KiB pages with their entries); measured at 4,096 tokens,
  // host_head_sharded: 27.6 MiB over 8 to 32 ranks, 2.7x the buffers.
  const uint64_t fixed = 3 * tables_bytes + (2u << 20) + (lookups_overlap ? 0 : 3 * lookup_buffers) + steps_bytes;
  // Calibration (VmHWM, benchmarks/emulator_scale_benchmark table 5): the
  // terms above came to 1.05-1.2x the measured device_collective peak at
  // 1,024 and 4,096 tokens; a quarter more covers allocator rounding and
  // what they miss, and keeps the bound within 2x of what a run uses.
  e.fixed_bytes = fixed + fixed / 4;
  e.per_rank_bytes = per_rank + per_rank / 4;
  e.total_bytes = e.fixed_bytes + e.per_rank_bytes * static_cast<uint64_t>(e.ranks);
  return e;
}

std::optional<MemoryLimit> machine_memory_limit() {
  std::optional<MemoryLimit> best;
  auto consider = [&best](uint64_t bytes, std::string source) {
    if (!best || bytes < best->bytes) best = MemoryLimit{bytes, std::move(source)};
  };
  if (auto available = proc_kib_field("/proc/meminfo", "MemAvailable"))
    consider(*available, "MemAvailable in /proc/meminfo");
  if (auto cgroup = shm::this_process_memory_cgroup(); cgroup.is_ok() && cgroup.value())
    consider(cgroup.value()->headroom_bytes(),
             fmt::format("the memory cgroup {} (limit {} less {} in use)", cgroup.value()->path,
                         format_bytes(cgroup.value()->limit_bytes), format_bytes(cgroup.value()->usage_bytes)));
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    const uint64_t used = proc_kib_field("/proc/self/status", "VmSize").value_or(0);
    const uint64_t cap = static_cast<uint64_t>(as.rlim_cur);
    consider(cap > used ? cap - used : 0,
             fmt::format("RLIMIT_AS (ulimit -v: {} less {} mapped)", format_bytes(cap), format_bytes(used)));
  }
  return best;
}

Status check_emulator_memory(const EmulatorMemoryEstimate& e, const MemoryLimit& limit) {
  if (e.total_bytes <= limit.bytes) return Status::ok();
  return resource_exhausted(fmt::format(
      "emulator: this run needs an estimated {} ({} a rank x {} ranks at {} lookup tokens a rank, plus {}), more "
      "than the {} this process may use ({}); nothing was started. Run fewer ranks or fewer lookup tokens "
      "(lookup.tokens), or use a machine with more memory",
      format_bytes(e.total_bytes), format_bytes(e.per_rank_bytes), e.ranks, e.lookup_tokens,
      format_bytes(e.fixed_bytes), format_bytes(limit.bytes), limit.source));
}

}  // namespace engram::harness
