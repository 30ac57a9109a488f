// The emulator at scale: 72, 288 and 1,152 ranks (1, 4 and 16 GB300 NVL72
// racks) each split by NVLink domain, exchanging V4.1-sized row shards
// (FABRIC, 64-byte handles) and reading a few rows from peers. Prints wall
// time and the process's peak RSS after each size, so growth is visible.
// Exits non-zero if any rank fails or anything leaks.
#include <fmt/format.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/base/bf16.h"
#include "core/runtime/engram_runtime.h"
#include "core/exchange/handle_exchange.h"
#include "core/model/row_format.h"
#include "core/model/table_fill.h"
#include "core/lookup/shard_layout.h"
#include "core/model/table_spec.h"
#include "sim/seed.h"
#include "sim/world.h"

namespace {

using namespace engram;

constexpr int kRowsWritten = 4;  // per rank, at the start of its shard
constexpr int kPeersRead = 3;

uint64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
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
    dequantize_row(table.row_format, table.dim, row, want);
    for (size_t k = 0; k < want.size(); ++k)
      if (!bf16_same(bf16_lookup_canonical(want[k]), out[i * want.size() + k]))
        return internal_error(fmt::format("rank {}: row {} differs from the direct lookup", b.world_rank, ids[i]));
  }
  return runtime->stop();
}

}  // namespace

int main() {
  auto model = model_preset("deepseek-v4.1-flash");
  if (!model.is_ok()) {
    std::fprintf(stderr, "%s\n", model.status().to_string().c_str());
    return 1;
  }
  int64_t table_rows = 0;
  for (const auto& t : model->tables) table_rows += t.row_count();
  const uint64_t row_bytes = model->tables[0].row_bytes();

  std::printf("emulated GB300 NVL72 racks, device_peer shards per rack of V4.1-Flash (%.2f GiB per table pair)\n",
              static_cast<double>(model->table_bytes_total()) / (1ull << 30));
  std::printf("%8s %6s %14s %10s %10s %14s %10s\n", "ranks", "racks", "shard_GiB", "wall_ms", "rss_MiB",
              "sched_switches", "result");
  bool all_good = true;
  for (int racks : {1, 4, 16}) {
    sim::WorldSpec spec;
    spec.hosts = sim::gb300_nvl72_racks(racks);
    spec.seed = 42;
    const auto start = std::chrono::steady_clock::now();
    auto run = sim::run_world(spec, [&](RankBackend& b) { return rank_body(b, table_rows, row_bytes); });
    const double wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!run.is_ok()) {
      std::fprintf(stderr, "%s\n", run.status().to_string().c_str());
      return 1;
    }
    const bool good = run->all_ok() && run->leaks.empty();
    all_good &= good;
    const RowShardLayout layout(table_rows, 72);
    std::printf("%8zu %6d %14.3f %10.1f %10.1f %14llu %10s\n", run->statuses.size(), racks,
                static_cast<double>(layout.max_shard_rows() * static_cast<int64_t>(row_bytes)) / (1ull << 30),
                wall_ms, static_cast<double>(peak_rss_bytes()) / (1 << 20),
                static_cast<unsigned long long>(run->scheduler_switches), good ? "ok" : "FAILED");
    if (!good) std::fprintf(stderr, "%s\n", run->summary().c_str());
  }

  std::printf("\nthe whole start (facts, placement by plan's rules, exchange, lookup check, stop), tiny table\n");
  std::printf("%8s %6s %10s %10s %14s %10s\n", "ranks", "racks", "wall_ms", "rss_MiB", "sched_switches", "result");
  for (int racks : {1, 4, 16}) {
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
    const double wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!run.is_ok()) {
      std::fprintf(stderr, "%s\n", run.status().to_string().c_str());
      return 1;
    }
    const bool good = run->all_ok() && run->leaks.empty();
    all_good &= good;
    std::printf("%8zu %6d %10.1f %10.1f %14llu %10s\n", run->statuses.size(), racks, wall_ms,
                static_cast<double>(peak_rss_bytes()) / (1 << 20),
                static_cast<unsigned long long>(run->scheduler_switches), good ? "ok" : "FAILED");
    if (!good) std::fprintf(stderr, "%s\n", run->summary().c_str());
  }
  return all_good ? 0 : 1;
}
