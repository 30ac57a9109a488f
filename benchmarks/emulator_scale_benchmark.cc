// The emulator at scale, as tables (a benchmark, not a timed test):
//   1. GB300 NVL72 racks (72 to 9,216 ranks) split by NVLink domain,
//      exchanging V4.1-sized row shards (FABRIC) and reading rows of peers;
//   2. the whole start (facts, placement by plan's rules, exchange, lookup
//      check, stop) over the same racks;
//   3. the worst shape for the emulator: every rank its own one-GPU host,
//      DP = ranks, lookups on (run as a scenario runs);
//   4. `plan` of large layouts;
//   5. lookup memory per rank at 4,096 tokens a rank, beside the estimate
//      run_emulated_job makes before it starts (harness/emulator_memory.h).
// Each row runs in a child process, so its peak RSS and CPU time are its
// own. Prints wall time, CPU time (what the emulator costs whatever else
// shares the cores), CPU and user time per rank, peak RSS, scheduler
// switches and simulated time.
// Exits non-zero if any rank fails or anything leaks.
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/base/bf16.h"
#include "core/runtime/engram_runtime.h"
#include "core/exchange/handle_exchange.h"
#include "core/model/row_format.h"
#include "core/model/table_fill.h"
#include "core/lookup/shard_layout.h"
#include "core/model/table_spec.h"
#include "sim/seed.h"
#include "sim/world.h"
#include "harness/emulated_scenario.h"
#include "core/plan/deployment_plan.h"

namespace {

using namespace engram;

constexpr int kRowsWritten = 4;  // per rank, at the start of its shard
constexpr int kPeersRead = 3;

uint64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// VmRSS now (peak_rss_bytes is the process's peak so far).
uint64_t current_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "VmRSS: %llu kB", &kib) == 1) break;
  std::fclose(f);
  return kib * 1024;
}

std::byte pattern(int64_t row, uint64_t i) { return std::byte(static_cast<uint8_t>(row * 131 + i)); }

Status rank_body(RankBackend& b, int64_t table_rows, uint64_t row_bytes) {
  // One shard group per NVLink domain, as device_peer shards within a rack.
  const PlacementFacts facts = b.probe->facts();
  const int color = static_cast<int>(sim::fnv1a64(facts.nvlink_domain) & 0x7fffffff);
  ENGRAM_ASSIGN_OR_RETURN(auto domain, b.world->split(color, b.world_rank));
  RowShardLayout layout(table_rows, domain->size());
  const uint64_t shard_bytes = static_cast<uint64_t>(layout.max_shard_rows()) * row_bytes;
  ENGRAM_ASSIGN_OR_RETURN(SharedMapping mapping, exchange_shareable_handles(b, *domain, shard_bytes));
  if (mapping.handle_type() != HandleType::kFabric) return internal_error("expected FABRIC handles inside a rack");

  const int me = domain->rank();
  std::vector<std::byte> rows(kRowsWritten * row_bytes);
  for (uint64_t k = 0; k < rows.size(); ++k) rows[k] = pattern(layout.shard_begin(me) + static_cast<int64_t>(k / row_bytes), k % row_bytes);
  ENGRAM_RETURN_IF_ERROR(b.device->copy_to_device(mapping.local(), rows));
  ENGRAM_RETURN_IF_ERROR(domain->barrier());
  std::vector<std::byte> got(row_bytes);
  for (int k = 1; k <= kPeersRead; ++k) {
    const int owner = (me + k) % domain->size();
    const int64_t row = layout.shard_begin(owner) + k % kRowsWritten;
    ENGRAM_RETURN_IF_ERROR(b.device->copy_from_device(
        got, mapping.peer(owner) + static_cast<uint64_t>(row - layout.shard_begin(owner)) * row_bytes));
    for (uint64_t i = 0; i < row_bytes; ++i)
      if (got[i] != pattern(row, i))
        return internal_error(fmt::format("row {} read from rank {} differs", row, mapping.world_rank_of(owner)));
  }
  return mapping.teardown();
}

// The whole start as an engine runs it: gather facts, decide the placement
// with plan's rules (V4.1 sizes), exchange shards per rack (a small table of
// V4.1's structure is what gets filled), look up, compare with the direct
// lookup, stop.
Status runtime_body(RankBackend& b, const RuntimeOptions& options, WarningSink& sink) {
  ENGRAM_ASSIGN_OR_RETURN(auto runtime, EngramRuntime::start(b, options, sink));
  if (runtime->placement() != Placement::kDevicePeer) return internal_error("expected device_peer");
  const TableSpec& table = options.table_model.tables[0];
  std::vector<int64_t> ids;
  for (int h = 0; h < table.head_count(); ++h)
    ids.push_back((static_cast<int64_t>(b.world_rank) * 7919 + h * 104729) % table.row_count());
  std::vector<uint16_t> out(ids.size() * static_cast<size_t>(table.dim));
  ENGRAM_RETURN_IF_ERROR(runtime->lookup(0, ids, 1, out));
  std::vector<std::byte> row(table.row_bytes());
  std::vector<uint16_t> want(static_cast<size_t>(table.dim));
  for (size_t i = 0; i < ids.size(); ++i) {
    fill_table_rows(table, options.fill_seed, ids[i], row);
    dequantize_row(table, row, want);
    for (size_t k = 0; k < want.size(); ++k)
      if (!bf16_same(bf16_lookup_canonical(want[k]), out[i * want.size() + k]))
        return internal_error(fmt::format("rank {}: row {} differs from the direct lookup", b.world_rank, ids[i]));
  }
  return runtime->stop();
}

// Runs `row` in a child process; returns its exit status. The child prints
// its own table row (so its peak RSS is its own).
// --in-process runs rows here instead (for heap profilers that follow one
// process; the peak RSS printed is then the largest row's so far).
bool g_in_process = false;

template <typename Row>
int in_child(Row row) {
  if (g_in_process) return row();
  std::fflush(stdout);
  const pid_t child = ::fork();
  if (child == 0) {
    const int rc = row();
    std::fflush(stdout);
    ::_exit(rc);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// CPU time this process used (user + system): what the emulator costs,
// whatever else shares the machine's cores (wall time is printed beside it).
// User time alone is the emulator's own work; system time is mostly the
// kernel handing it fresh memory, whose cost per page swings several-fold
// on a VM whose host has not yet backed that memory
// (docs/emulator_perf_notes.md; benchmarks/memory_probe.cc measures it).
// The kernel splits a process's time into user and system by sampling at
// its tick, so rows of a few milliseconds show a coarse split.
double ms_of(const timeval& t) { return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3; }
double cpu_ms() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return ms_of(usage.ru_utime) + ms_of(usage.ru_stime);
}
double user_ms() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return ms_of(usage.ru_utime);
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

void print_world_row(size_t ranks, const char* shape, double wall_ms, const sim::WorldRun& run, bool good) {
  const double cpu = cpu_ms();
  const double per_rank = 1000.0 / static_cast<double>(ranks);
  std::printf("%8zu %10s %10.1f %10.1f %12.1f %12.1f %10.1f %14llu %12.1f %8s\n", ranks, shape, wall_ms, cpu,
              per_rank * cpu, per_rank * user_ms(), static_cast<double>(peak_rss_bytes()) / (1 << 20),
              static_cast<unsigned long long>(run.scheduler_switches), static_cast<double>(run.end_time_us) / 1e6,
              good ? "ok" : "FAILED");
}

const char* kWorldHeader = "%8s %10s %10s %10s %12s %12s %10s %14s %12s %8s\n";

// Every rank its own one-GPU host, DP = ranks, looking up `tokens` a rank.
harness::EmulatedJob one_gpu_hosts_job(int ranks, int tokens, int slot_tokens) {
  harness::EmulatedJob job;
  job.deployment.hosts = sim::plain_hosts("h", ranks, 1, "H200");
  for (auto& h : job.deployment.hosts) h.tmpfs_bytes_total = 512ull << 30;
  job.deployment.layout = ParallelLayout{1, ranks};
  job.deployment.config.tokens_per_rank_max = slot_tokens;
  job.lookup.tokens = tokens;
  job.seed = 42;
  return job;
}

}  // namespace

int main(int argc, char** argv) {
  // --max-racks N caps the rack sizes (default 128: 9,216 ranks).
  // --tables 12345 picks the tables to run (default all).
  // --ranks N runs only the rows of tables 1-3 with N ranks (to profile one).
  // --in-process: no child process per row.
  // --tokens N and --offload: table 5 at N tokens a rank (default 4,096), host placements.
  int max_racks = 128;
  int table5_tokens = 4096;
  bool table5_offload = false;
  int only_ranks = 0;
  std::string tables = "12345";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--max-racks") == 0) max_racks = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--tables") == 0) tables = argv[i + 1];
    if (std::strcmp(argv[i], "--ranks") == 0) only_ranks = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--tokens") == 0) table5_tokens = std::atoi(argv[i + 1]);
  }
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--in-process") == 0) g_in_process = true;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--offload") == 0) table5_offload = true;
  auto skipped = [&](int ranks) { return only_ranks != 0 && ranks != only_ranks; };
  auto wanted = [&](char table) { return tables.find(table) != std::string::npos; };
  auto model = model_preset("deepseek-v4.1-flash");
  if (!model.is_ok()) {
    std::fprintf(stderr, "%s\n", model.status().to_string().c_str());
    return 1;
  }
  int64_t table_rows = 0;
  for (const auto& t : model->tables) table_rows += t.row_count();
  const uint64_t row_bytes = model->tables[0].row_bytes();
  std::vector<int> rack_counts;
  for (int racks : {1, 4, 16, 64, 128})
    if (racks <= max_racks) rack_counts.push_back(racks);
  bool all_good = true;

  if (wanted('1')) {
  std::printf("1. device_peer shards per GB300 NVL72 rack of V4.1-Flash (%.2f GiB per table pair), FABRIC handles\n",
              static_cast<double>(model->table_bytes_total()) / (1ull << 30));
  std::printf(kWorldHeader, "ranks", "racks", "wall_ms", "cpu_ms", "cpu_us_per_rank", "user_us_per_rank", "rss_MiB", "sched_switches", "sim_time_s",
              "result");
  for (int racks : rack_counts) {
    if (skipped(72 * racks)) continue;
    all_good &= in_child([&] {
      sim::WorldSpec spec;
      spec.hosts = sim::gb300_nvl72_racks(racks);
      spec.seed = 42;
      const auto start = std::chrono::steady_clock::now();
      auto run = sim::run_world(spec, [&](RankBackend& b) { return rank_body(b, table_rows, row_bytes); });
      const double wall_ms = ms_since(start);
      if (!run.is_ok()) {
        std::fprintf(stderr, "%s\n", run.status().to_string().c_str());
        return 1;
      }
      const bool good = run->all_ok() && run->leaks.empty();
      print_world_row(run->statuses.size(), std::to_string(racks).c_str(), wall_ms, *run, good);
      if (!good) std::fprintf(stderr, "%s\n", run->summary().c_str());
      return good ? 0 : 1;
    }) == 0;
  }

  }
  if (wanted('2')) {
  std::printf("\n2. the whole start (facts, placement by plan's rules, exchange, lookup check, stop), tiny table\n");
  std::printf(kWorldHeader, "ranks", "racks", "wall_ms", "cpu_ms", "cpu_us_per_rank", "user_us_per_rank", "rss_MiB", "sched_switches", "sim_time_s",
              "result");
  for (int racks : rack_counts) {
    if (skipped(72 * racks)) continue;
    all_good &= in_child([&] {
      sim::WorldSpec spec;
      spec.hosts = sim::gb300_nvl72_racks(racks);
      spec.seed = 42;
      RuntimeOptions options;
      options.table_model = model_preset("tiny").value();
      options.layout = ParallelLayout{4, 18 * racks};
      options.config.peer_shards = true;
      options.config.shard_group = ShardGroup::kNvlinkDomain;
      WarningSink sink;
      const auto start = std::chrono::steady_clock::now();
      auto run = sim::run_world(spec, [&](RankBackend& b) { return runtime_body(b, options, sink); });
      const double wall_ms = ms_since(start);
      if (!run.is_ok()) {
        std::fprintf(stderr, "%s\n", run.status().to_string().c_str());
        return 1;
      }
      const bool good = run->all_ok() && run->leaks.empty();
      print_world_row(run->statuses.size(), std::to_string(racks).c_str(), wall_ms, *run, good);
      if (!good) std::fprintf(stderr, "%s\n", run->summary().c_str());
      return good ? 0 : 1;
    }) == 0;
  }

  }
  if (wanted('3')) {
  std::printf("\n3. every rank its own one-GPU host, DP = ranks, lookups on (4 tokens a rank), as a scenario runs\n");
  std::printf(kWorldHeader, "ranks", "placement", "wall_ms", "cpu_ms", "cpu_us_per_rank", "user_us_per_rank", "rss_MiB", "sched_switches",
              "sim_time_s", "result");
  for (int ranks : {128, 256, 512, 1024, 2048}) {
    if (ranks > 16 * max_racks) break;
    if (skipped(ranks)) continue;
    for (bool offload : {false, true}) {
      all_good &= in_child([&] {
        harness::EmulatedJob job = one_gpu_hosts_job(ranks, 4, 8);
        job.deployment.config.cpu_offload = offload;
        const auto start = std::chrono::steady_clock::now();
        harness::EmulatedOutcome out = harness::run_emulated_job(job);
        const double wall_ms = ms_since(start);
        const bool good = !out.error && out.world.leaks.empty();
        print_world_row(out.ranks.size(), harness::placement_summary(out).substr(0, 10).c_str(), wall_ms, out.world,
                        good);
        if (!good) std::fprintf(stderr, "%s\n", out.error ? out.error->to_string().c_str() : "leaks");
        return good ? 0 : 1;
      }) == 0;
    }
  }

  }
  if (wanted('5')) {
  // Issue 35: lookup memory was unannounced at large token counts; this row
  // shows what a rank costs at the documented maximum, so growth in ranks
  // can be read off (the MiB per rank should stay flat).
  std::printf("\n5. lookup memory at %d tokens a rank: every rank its own one-GPU host, DP = ranks%s; the "
              "estimate is what run_emulated_job compares with the machine's limit before it starts\n",
              table5_tokens, table5_offload ? ", cpu_offload" : "");
  // run_MiB: the peak RSS less the RSS when the row began (what the run
  // added, which is what the estimate bounds); its share a rank beside the
  // estimate's figure a rank.
  std::printf("%8s %10s %10s %10s %10s %14s %10s %14s %8s\n", "ranks", "placement", "wall_ms", "rss_MiB", "run_MiB",
              "MiB_per_rank", "est_MiB", "est_per_rank", "result");
  for (int ranks : {8, 16, 32}) {
    if (ranks > 16 * max_racks) break;
    if (skipped(ranks)) continue;
    all_good &= in_child([&] {
      harness::EmulatedJob job = one_gpu_hosts_job(ranks, table5_tokens, table5_tokens);
      job.deployment.config.cpu_offload = table5_offload;
      const double before_mib = static_cast<double>(current_rss_bytes()) / (1 << 20);
      const auto start = std::chrono::steady_clock::now();
      harness::EmulatedOutcome out = harness::run_emulated_job(job);
      const double wall_ms = ms_since(start);
      const bool good = !out.error && out.world.leaks.empty();
      const double rss_mib = static_cast<double>(peak_rss_bytes()) / (1 << 20);
      const double est_mib = static_cast<double>(out.memory_estimate.total_bytes) / (1 << 20);
      std::printf("%8d %10s %10.1f %10.1f %10.1f %14.2f %10.1f %14.2f %8s\n", ranks,
                  harness::placement_summary(out).substr(0, 10).c_str(), wall_ms, rss_mib, rss_mib - before_mib,
                  (rss_mib - before_mib) / ranks, est_mib,
                  static_cast<double>(out.memory_estimate.per_rank_bytes) / (1 << 20), good ? "ok" : "FAIL");
      if (!good) std::fprintf(stderr, "%s\n", out.error ? out.error->to_string().c_str() : "leaks");
      return good ? 0 : 1;
    }) == 0;
  }
  }
  if (wanted('4')) {
  std::printf("\n4. plan (placement, groups, memory) of large layouts: 8-GPU H200 hosts\n");
  std::printf("%10s %10s %10s %10s %8s\n", "tp", "dp", "ranks", "wall_ms", "rss_MiB");
  for (auto [tp, dp] : {std::pair{8, 1152}, std::pair{8, 16384}, std::pair{64, 16384}}) {
    all_good &= in_child([&] {
      Deployment d;
      HostSpec proto;
      proto.gpu_count = 8;
      proto.tmpfs_bytes_total = 512ull << 30;
      const int hosts = tp * dp / 8;
      for (int h = 0; h < hosts; ++h) {
        d.hosts.push_back(proto);
        d.hosts.back().name = fmt::format("node-{}", h);
      }
      d.layout = ParallelLayout{tp, dp};
      d.config.cpu_offload = true;
      WarningSink sink;
      const auto start = std::chrono::steady_clock::now();
      auto plan = plan_deployment(d, sink);
      const double wall_ms = ms_since(start);
      std::printf("%10d %10d %10d %10.1f %8.1f%s\n", tp, dp, tp * dp, wall_ms,
                  static_cast<double>(peak_rss_bytes()) / (1 << 20),
                  plan.is_ok() ? "" : ("  refused: " + plan.status().to_string()).c_str());
      return 0;
    }) == 0;
  }
  }
  return all_good ? 0 : 1;
}
