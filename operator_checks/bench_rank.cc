#include "operator_checks/bench_rank.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <span>

#include "core/base/check.h"
#include "core/base/splitmix64.h"
#include "core/plan/placement_config.h"
#include "operator_checks/device_buffers.h"
#include "operator_checks/lookup_checks.h"
#include "operator_checks/replay_timing.h"

namespace engram::operator_checks {
namespace {

EngramConfig config_for(Placement placement, EngramConfig base) { return config_asking_for(placement, base); }

// Host memory for the pinned copy: page-aligned (as the engines' pinned
// buffers are), registered with the device for as long as this lives, and
// unregistered before it is freed, on every path.
class PinnedHostBuffer {
 public:
  static Result<std::unique_ptr<PinnedHostBuffer>> make(DeviceCompute& compute, uint64_t bytes) {
    std::unique_ptr<PinnedHostBuffer> b(new PinnedHostBuffer(compute, bytes));
    std::fill_n(b->data_, bytes, std::byte{0});  // touch every page before registering
    ENGRAM_ASSIGN_OR_RETURN(b->device_address_, compute.register_host(b->span()));
    b->registered_ = true;
    return b;
  }
  ~PinnedHostBuffer() {
    if (registered_) compute_.unregister_host(span()).ignore();
    ::operator delete(data_, std::align_val_t{kPage});
  }
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  DevicePtr device_address() const { return device_address_; }

 private:
  static constexpr size_t kPage = 4096;
  PinnedHostBuffer(DeviceCompute& compute, uint64_t bytes)
      : compute_(compute), bytes_(bytes), data_(static_cast<std::byte*>(::operator new(bytes, std::align_val_t{kPage}))) {}
  std::span<const std::byte> span() const { return {data_, bytes_}; }
  DeviceCompute& compute_;
  uint64_t bytes_;
  std::byte* data_;
  DevicePtr device_address_ = 0;
  bool registered_ = false;
};

}  // namespace

std::string bench_placement_flags(Placement placement) {
  const EngramConfig c = config_for(placement, {});
  std::string flags;
  if (c.peer_shards) flags += "--peer-shards";
  if (c.cpu_offload) flags += "--cpu-offload";
  if (c.dp_shared_memory == false) flags += " --dp-shared-memory false";
  if (!c.placement.empty()) flags += (flags.empty() ? "" : " ") + std::string("--placement ") + c.placement;
  return flags.empty() ? "(no flag)" : flags;
}

uint64_t id_draws_fingerprint(const BenchIdDraws& draws, int tokens) {
  ENGRAM_CHECK(draws.draws >= 1 && draws.ids);
  uint64_t fingerprint = static_cast<uint64_t>(tokens);
  for (int d = 0; d < draws.draws; ++d) {
    const std::vector<int64_t> ids = draws.ids(tokens, d);
    fingerprint = splitmix64_fold(fingerprint, ids.data(), ids.size());
  }
  return fingerprint;
}

Status check_bench_options(const BenchOptions& options, int me) {
  auto invalid = [me](std::string what) { return Status(ErrorCode::kInvalidArgument, std::move(what), {me, -1, "bench"}); };
  if (options.token_counts.empty()) return invalid("--tokens: give at least one token count, e.g. --tokens 1,64,1024,8192");
  for (int t : options.token_counts)
    if (t < 1) return invalid(fmt::format("--tokens: {} is not a positive token count; write e.g. --tokens 1,64", t));
  if (options.timed_replays < 1 || options.warmup_replays < 0 || options.sampled_slots < 0)
    return invalid(fmt::format("--replays {} must be >= 1, --warmup {} >= 0, --samples {} >= 0", options.timed_replays,
                               options.warmup_replays, options.sampled_slots));
  if (options.id_draws < 1 || options.id_draws > options.timed_replays)
    return invalid(fmt::format("--id-draws {} must be from 1 to --replays ({}): each draw of ids needs a timed replay",
                               options.id_draws, options.timed_replays));
  const ModelSpec& model = options.runtime.table_model;
  if (options.table_index < 0 || options.table_index >= static_cast<int>(model.tables.size()))
    return invalid(fmt::format("--table: {} is not a table of {} (it has {}); write 0..{}", options.table_index,
                               model.name, model.tables.size(), model.tables.size() - 1));
  return Status::ok();
}

namespace {

bool asked_for(const BenchOptions& options, Placement placement) {
  return std::find(options.placements.begin(), options.placements.end(), placement) != options.placements.end();
}

BenchPlacementRow& row_of(BenchReport& report, Placement placement) {
  return *std::find_if(report.placements.begin(), report.placements.end(),
                       [placement](const BenchPlacementRow& r) { return r.placement == placement; });
}

uint64_t read_bytes_of(const TableSpec& table, int tokens) {
  return static_cast<uint64_t>(tokens) * static_cast<uint64_t>(table.head_count()) * table.row_bytes();
}

// The ids world rank `rank` looks up at `tokens`, draw `draw`: seeded by
// rank, size and draw only, so every placement (and, for rank 0, the
// one-process kernels) looks up the same ones.
LookupTestIds draw_ids(const BenchOptions& options, const TableSpec& table, const SpecialRows& special, int rank,
                       int tokens, int draw) {
  const uint64_t size_seed = splitmix64_at(options.ids_seed, static_cast<uint64_t>(rank) * 1000003 + tokens);
  return make_lookup_test_ids(table, tokens, splitmix64_at(size_seed, static_cast<uint64_t>(draw)), special);
}

BenchIdDraws rank_id_draws(const BenchOptions& options, const TableSpec& table, const SpecialRows& special,
                           int rank) {
  return BenchIdDraws{options.id_draws, [&options, &table, special, rank](int tokens, int draw) {
                        return draw_ids(options, table, special, rank, tokens, draw).ids;
                      }};
}

// What the run is, and a row per registered placement (not run until asked).
void describe_run(const RankBackend& backend, const BenchOptions& options, const TableSpec& table,
                  BenchReport& report) {
  report.rank = backend.world_rank;
  report.world_size = backend.world_size;
  report.layout = options.runtime.layout;
  report.table_model = options.runtime.table_model.name;
  report.layer_id = table.layer_id;
  report.table_rows = table.row_count();
  report.row_bytes = table.row_bytes();
  report.heads = table.head_count();
  report.dim = table.dim;
  report.warmup_replays = options.warmup_replays;
  report.timed_replays = options.timed_replays;
  report.id_draws = options.id_draws;
  report.token_counts = options.token_counts;
  for (const PlacementOps& ops : placement_registry()) {
    BenchPlacementRow row;
    row.placement = ops.id;
    row.asked_with = bench_placement_flags(ops.id);
    row.cells.resize(options.token_counts.size());
    row.not_run_reason = "not asked for (--placements)";
    report.placements.push_back(std::move(row));
  }
  for (Placement p : options.placements) row_of(report, p).not_run_reason.clear();
}

// Rank 0's one-process kernel reference, alone on the machine: the other
// ranks wait, so nothing else runs on the GPUs meanwhile. Its figures go to
// `into` (report.reference or report.reference_after); why it did not run,
// to the report's notes.
Status measure_one_process_reference(Collectives& world, int me, const BenchOptions& options,
                                     const TableSpec& table, const BenchIdDraws& ids,
                                     std::optional<OneProcessFigures>& into, BenchReport& report) {
  if (me == 0) {
    auto figures = options.reference(options.token_counts, table, ids);
    if (figures.is_ok()) into = std::move(figures).value();
    else report.notes.push_back("one-process reference not measured: " + figures.status().to_string());
  }
  return world.barrier();
}

// The ceilings of this run on every rank's device, all ranks together (as
// the lookups run): an HBM copy and a pinned host-to-device copy of the
// bytes each size's lookup reads.
Status measure_ceilings(DeviceCompute& compute, Collectives& world, const BenchOptions& options,
                        const TableSpec& table, int me, BenchReport& report) {
  uint64_t read_max = 0;
  for (int t : options.token_counts) read_max = std::max(read_max, read_bytes_of(table, t));
  DeviceBuffers buffers(compute);
  ENGRAM_ASSIGN_OR_RETURN(DevicePtr source, buffers.make(read_max));
  ENGRAM_ASSIGN_OR_RETURN(DevicePtr target, buffers.make(read_max));
  ENGRAM_RETURN_IF_ERROR(compute.fill_async(source, 0x5a, read_max, {}));
  ENGRAM_RETURN_IF_ERROR(compute.synchronize({}));
  ENGRAM_ASSIGN_OR_RETURN(auto pinned, PinnedHostBuffer::make(compute, read_max));
  for (int tokens : options.token_counts) {
    BenchCeilings c;
    c.tokens = tokens;
    c.read_bytes = read_bytes_of(table, tokens);
    auto time_copy = [&](DevicePtr from, BenchCell& into) -> Status {
      ENGRAM_RETURN_IF_ERROR(world.barrier());
      ENGRAM_ASSIGN_OR_RETURN(into.latency, capture_and_time(compute, [&](StreamRef s) {
                                return compute.copy_async(target, from, c.read_bytes, s);
                              }, options.warmup_replays, options.timed_replays));
      into.ran = true;
      return Status::ok();
    };
    ENGRAM_RETURN_IF_ERROR(time_copy(source, c.hbm_copy).with_context(me, -1, "bench: HBM copy"));
    ENGRAM_RETURN_IF_ERROR(time_copy(pinned->device_address(), c.pinned_host_copy)
                               .with_context(me, -1, "bench: pinned host-to-device copy"));
    report.ceilings.push_back(c);
  }
  return Status::ok();
}

// What one placement's measurement reads and fills.
struct PlacementBench {
  DeviceCompute& compute;
  Collectives& world;
  EngramRuntime& runtime;
  const BenchOptions& options;
  const TableSpec& table;
  const SpecialRows& special;  // the ids' -0 and NaN rows (draw_ids)
  int tokens_max = 0;
  int me = 0;  // world rank
  BenchPlacementRow& row;
};

// Eager, into a poisoned output, checked against the CPU reference.
Status check_eager_lookup(PlacementBench& b, const DeviceLookupRequest& request, const LookupTestIds& ids) {
  const int me = b.me;
  const TableSpec& table = b.table;
  const DevicePtr out_d = request.output;
  const uint64_t out_bytes = ids.ids.size() * static_cast<uint64_t>(table.dim) * 2;
  ENGRAM_RETURN_IF_ERROR(b.compute.fill_async(out_d, 0xff, out_bytes, request.stream));
  ENGRAM_RETURN_IF_ERROR(b.runtime.lookup_device(b.options.table_index, request));
  ENGRAM_RETURN_IF_ERROR(b.compute.synchronize(request.stream));
  std::vector<uint16_t> eager(ids.ids.size() * static_cast<size_t>(table.dim));
  ENGRAM_RETURN_IF_ERROR(b.compute.copy_to_host(std::as_writable_bytes(std::span<uint16_t>(eager)), out_d));
  const std::vector<int64_t> checked = slots_to_check(ids, b.options.sampled_slots);
  const std::vector<std::string> mismatches =
      check_against_cpu_reference(table, b.options.runtime.fill_seed, ids, checked, eager, 1);
  const char* name = placement_name(b.row.placement);
  if (!mismatches.empty())
    return Status(ErrorCode::kInternal,
                  fmt::format("{} at {} tokens differs from the CPU reference: {}", name, request.tokens,
                              mismatches.front()),
                  {me, -1, fmt::format("bench {}", name)});
  b.row.slots_checked += static_cast<int64_t>(checked.size());
  return Status::ok();
}

// Every size on one started placement: each draw of ids checked eagerly,
// then timed in one captured graph (it reads the ids buffer, refilled each
// draw), the ranks starting together as an engine's ranks do; the draws'
// replays pooled into the size's figure.
Status measure_placement(PlacementBench& b) {
  const int me = b.me;
  const TableSpec& table = b.table;
  const uint64_t slots_max = static_cast<uint64_t>(b.tokens_max) * static_cast<uint64_t>(table.head_count());
  DeviceBuffers buffers(b.compute);
  ENGRAM_ASSIGN_OR_RETURN(DevicePtr ids_d, buffers.make(slots_max * 8));
  ENGRAM_ASSIGN_OR_RETURN(DevicePtr out_d, buffers.make(slots_max * static_cast<uint64_t>(table.dim) * 2));
  for (size_t i = 0; i < b.options.token_counts.size(); ++i) {
    const int tokens = b.options.token_counts[i];
    DeviceLookupRequest request;
    request.row_ids = ids_d;
    request.tokens = tokens;
    // Each size is its own slot (an engine captures a graph per batch size),
    // as the one-process reference times it: like with like.
    request.tokens_per_rank_max = tokens;
    request.output = out_d;
    if (!b.runtime.device_lookup_ready()) {
      // Not built for this layout: the lookup answers why, on every rank alike.
      const Status why = b.runtime.lookup_device(b.options.table_index, request);
      b.row.not_run_reason = why.is_ok() ? "the device lookup is not built for this layout" : why.message();
      return Status::ok();
    }
    std::unique_ptr<DeviceGraph> graph;
    std::vector<double> samples_us;
    for (int draw = 0; draw < b.options.id_draws; ++draw) {
      const LookupTestIds ids = draw_ids(b.options, table, b.special, me, tokens, draw);
      ENGRAM_RETURN_IF_ERROR(b.compute.copy_to_device(ids_d, std::as_bytes(std::span<const int64_t>(ids.ids))));
      ENGRAM_RETURN_IF_ERROR(check_eager_lookup(b, request, ids));
      if (graph == nullptr) {
        ENGRAM_ASSIGN_OR_RETURN(graph, b.compute.capture([&](StreamRef s) {
                                  DeviceLookupRequest captured = request;
                                  captured.stream = s;
                                  return b.runtime.lookup_device(b.options.table_index, captured);
                                }));
      }
      ENGRAM_RETURN_IF_ERROR(b.world.barrier());
      ENGRAM_ASSIGN_OR_RETURN(std::vector<double> us,
                              graph->time(b.options.warmup_replays,
                                          replays_in_draw(b.options.timed_replays, b.options.id_draws, draw)));
      samples_us.insert(samples_us.end(), us.begin(), us.end());
    }
    ENGRAM_CHECK(samples_us.size() == static_cast<size_t>(b.options.timed_replays));
    ENGRAM_ASSIGN_OR_RETURN(b.row.cells[i].latency, latency_percentiles(std::move(samples_us)));
    b.row.cells[i].ran = true;
  }
  b.row.ran = true;
  return Status::ok();
}

// The placement the plan gave for a config, and why.
struct Reached {
  Placement placement;
  std::string reason;
};

std::string plan_gave_other(const BenchPlacementRow& asked_row, const Reached& reached) {
  return fmt::format("the plan gives {} for {} here ({})", placement_name(reached.placement), asked_row.asked_with,
                     reached.reason);
}

// Every placement asked for, through the runtime: each config once (a
// config the plan answers with another placement measures that one, if asked).
Status measure_asked_placements(RankBackend& backend, const BenchOptions& options, int tokens_max, WarningSink& sink,
                                const TableSpec& table, const SpecialRows& special, BenchReport& report) {
  std::map<std::string, Reached> reached;  // by the flags asked with
  for (const PlacementOps& ops : placement_registry()) {
    const Placement asked = ops.id;
    if (!asked_for(options, asked)) continue;
    BenchPlacementRow& asked_row = row_of(report, asked);
    if (asked_row.ran || !asked_row.not_run_reason.empty()) continue;
    if (auto it = reached.find(asked_row.asked_with); it != reached.end()) {
      asked_row.not_run_reason = plan_gave_other(asked_row, it->second);
      continue;
    }
    RuntimeOptions runtime_options = options.runtime;
    runtime_options.config =
        options.config_as_given ? options.runtime.config : config_for(asked, options.runtime.config);
    const auto start = std::chrono::steady_clock::now();
    auto started = EngramRuntime::start(backend, runtime_options, sink);
    if (!started.is_ok()) {
      // The runtime refuses alike on every rank (it decides from the same
      // facts), so the others list the same reason and go on together.
      asked_row.not_run_reason = "the runtime did not start: " + started.status().to_string();
      continue;
    }
    std::unique_ptr<EngramRuntime> runtime = std::move(started).value();
    const Placement got = runtime->placement();
    reached.emplace(asked_row.asked_with, Reached{got, runtime->facts().reason});
    BenchPlacementRow& row = row_of(report, got);
    if (got != asked) asked_row.not_run_reason = plan_gave_other(asked_row, reached.at(asked_row.asked_with));
    if (!asked_for(options, got) || row.ran) {
      ENGRAM_RETURN_IF_ERROR(runtime->stop());
      continue;
    }
    row.not_run_reason.clear();
    row.handle_type = runtime->facts().handle_type;
    row.build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // The runtime's table: its rules (the engine's scale bytes and -0 on this
    // placement's path) are what the CPU reference checks the lookup by.
    const TableSpec& decoded = runtime->table_model().tables[static_cast<size_t>(options.table_index)];
    PlacementBench bench{*backend.compute, *backend.world, *runtime,          options, decoded,
                         special,          tokens_max,     backend.world_rank, row};
    if (const Status measured = measure_placement(bench); !measured.is_ok()) {
      runtime->stop().ignore();
      return measured;
    }
    ENGRAM_RETURN_IF_ERROR(runtime->stop());
  }
  return Status::ok();
}

// The slowest rank's median of every figure, known to every rank.
Status share_slowest_rank_medians(Collectives& world, BenchReport& report) {
  std::vector<BenchCell*> cells;
  for (BenchPlacementRow& row : report.placements)
    for (BenchCell& c : row.cells) cells.push_back(&c);
  for (BenchCeilings& c : report.ceilings) {
    cells.push_back(&c.hbm_copy);
    cells.push_back(&c.pinned_host_copy);
  }
  std::vector<double> mine;
  for (const BenchCell* c : cells) mine.push_back(c->ran ? c->latency.p50_us : -1.0);
  std::vector<double> all(mine.size() * static_cast<size_t>(world.size()));
  ENGRAM_RETURN_IF_ERROR(world.all_gather(std::as_bytes(std::span<const double>(mine)),
                                          std::as_writable_bytes(std::span<double>(all))));
  for (size_t i = 0; i < cells.size(); ++i) {
    double slowest = 0;
    for (int r = 0; r < world.size(); ++r) slowest = std::max(slowest, all[static_cast<size_t>(r) * mine.size() + i]);
    cells[i]->latency_us_p50_slowest_rank = slowest;
  }
  return Status::ok();
}

}  // namespace

Status run_bench_rank(RankBackend& backend, BenchOptions options, WarningSink& sink, BenchReport& report) {
  const int me = backend.world_rank;
  ENGRAM_RETURN_IF_ERROR(check_bench_options(options, me));
  if (backend.compute == nullptr)
    return Status(ErrorCode::kFailedPrecondition,
                  "the bench looks up on this rank's GPU, but the rank has none (start one process per GPU; check "
                  "CUDA_VISIBLE_DEVICES and LOCAL_RANK)",
                  {me, -1, "bench"});
  if (options.placements.empty())
    for (const PlacementOps& ops : placement_registry()) options.placements.push_back(ops.id);
  const TableSpec& table = options.runtime.table_model.tables[static_cast<size_t>(options.table_index)];
  const int tokens_max = *std::max_element(options.token_counts.begin(), options.token_counts.end());
  options.runtime.config.tokens_per_rank_max = std::max(options.runtime.config.tokens_per_rank_max, tokens_max);

  describe_run(backend, options, table, report);
  const SpecialRows special = find_special_rows(table, options.runtime.fill_seed);
  const BenchIdDraws ids = rank_id_draws(options, table, special, me);
  for (int tokens : options.token_counts) report.ids_fingerprints.push_back(id_draws_fingerprint(ids, tokens));
  using Order = BenchOptions::ReferenceOrder;
  if (options.reference && options.reference_order != Order::kLast)
    ENGRAM_RETURN_IF_ERROR(
        measure_one_process_reference(*backend.world, me, options, table, ids, report.reference, report));
  ENGRAM_RETURN_IF_ERROR(measure_ceilings(*backend.compute, *backend.world, options, table, me, report));
  ENGRAM_RETURN_IF_ERROR(measure_asked_placements(backend, options, tokens_max, sink, table, special, report));
  if (options.reference && options.reference_order != Order::kFirst) {
    // Last alone is the report's only reference; after a first one, its second.
    std::optional<OneProcessFigures>& into =
        options.reference_order == Order::kLast ? report.reference : report.reference_after;
    ENGRAM_RETURN_IF_ERROR(measure_one_process_reference(*backend.world, me, options, table, ids, into, report));
  }
  return share_slowest_rank_medians(*backend.world, report);
}

}  // namespace engram::operator_checks
