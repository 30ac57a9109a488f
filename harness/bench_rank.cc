#include "harness/bench_rank.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <new>
#include <span>

#include "core/base/splitmix64.h"
#include "harness/device_buffers.h"
#include "harness/lookup_checks.h"
#include "harness/replay_timing.h"

namespace engram {
namespace {

// The config that asks the plan for each placement; host_head_sharded is
// what the plan gives for an offloaded table where host_shared cannot work.
EngramConfig config_for(Placement placement, EngramConfig base) {
  base.cpu_offload = false;
  base.peer_shards = false;
  base.dp_shared_memory.reset();
  switch (placement) {
    case Placement::kDeviceCollective: break;
    case Placement::kDevicePeer: base.peer_shards = true; break;
    case Placement::kHostShared:
    case Placement::kHostHeadSharded: base.cpu_offload = true; break;
    case Placement::kHostPrivate:
      base.cpu_offload = true;
      base.dp_shared_memory = false;
      break;
  }
  return base;
}

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
  return flags.empty() ? "(no flag)" : flags;
}

Status run_bench_rank(RankBackend& backend, BenchOptions options, WarningSink& sink, BenchReport& report) {
  const int me = backend.world_rank;
  auto invalid = [me](std::string what) { return Status(ErrorCode::kInvalidArgument, std::move(what), {me, -1, "bench"}); };
  if (options.token_counts.empty()) return invalid("--tokens: give at least one token count, e.g. --tokens 1,64,1024,8192");
  for (int t : options.token_counts)
    if (t < 1) return invalid(fmt::format("--tokens: {} is not a positive token count; write e.g. --tokens 1,64", t));
  if (options.timed_replays < 1 || options.warmup_replays < 0 || options.sampled_slots < 0)
    return invalid(fmt::format("--replays {} must be >= 1, --warmup {} >= 0, --samples {} >= 0", options.timed_replays,
                               options.warmup_replays, options.sampled_slots));
  const ModelSpec& model = options.runtime.table_model;
  if (options.table_index < 0 || options.table_index >= static_cast<int>(model.tables.size()))
    return invalid(fmt::format("--table: {} is not a table of {} (it has {}); write 0..{}", options.table_index,
                               model.name, model.tables.size(), model.tables.size() - 1));
  if (backend.compute == nullptr)
    return Status(ErrorCode::kFailedPrecondition,
                  "the bench looks up on this rank's GPU, but the rank has none (start one process per GPU; check "
                  "CUDA_VISIBLE_DEVICES and LOCAL_RANK)",
                  {me, -1, "bench"});
  if (options.placements.empty())
    for (const PlacementOps& ops : placement_registry()) options.placements.push_back(ops.id);

  DeviceCompute& compute = *backend.compute;
  Collectives& world = *backend.world;
  const TableSpec& table = model.tables[static_cast<size_t>(options.table_index)];
  const uint64_t fill_seed = options.runtime.fill_seed;
  const int tokens_max = *std::max_element(options.token_counts.begin(), options.token_counts.end());
  options.runtime.config.tokens_per_rank_max = std::max(options.runtime.config.tokens_per_rank_max, tokens_max);
  const size_t sizes = options.token_counts.size();

  report.rank = me;
  report.world_size = backend.world_size;
  report.layout = options.runtime.layout;
  report.table_model = model.name;
  report.layer_id = table.layer_id;
  report.table_rows = table.row_count();
  report.row_bytes = table.row_bytes();
  report.heads = table.head_count();
  report.dim = table.dim;
  report.warmup_replays = options.warmup_replays;
  report.timed_replays = options.timed_replays;
  report.token_counts = options.token_counts;
  for (const PlacementOps& ops : placement_registry()) {
    BenchPlacementRow row;
    row.placement = ops.id;
    row.asked_with = bench_placement_flags(ops.id);
    row.cells.resize(sizes);
    row.not_run_reason = "not asked for (--placements)";
    report.placements.push_back(std::move(row));
  }
  auto row_of = [&](Placement p) -> BenchPlacementRow& {
    return *std::find_if(report.placements.begin(), report.placements.end(),
                         [p](const BenchPlacementRow& r) { return r.placement == p; });
  };
  for (Placement p : options.placements) row_of(p).not_run_reason.clear();

  // 1. Rank 0's one-process kernel reference, alone on the machine: the
  //    other ranks wait, so nothing else runs on the GPUs meanwhile.
  if (options.reference) {
    if (me == 0) {
      auto figures = options.reference(options.token_counts, table.head_count());
      if (figures.is_ok()) report.reference = std::move(figures).value();
      else report.notes.push_back("one-process reference not measured: " + figures.status().to_string());
    }
    ENGRAM_RETURN_IF_ERROR(world.barrier());
  }

  // 2. The ceilings of this run on every rank's device, all ranks together
  //    (as the lookups run): an HBM copy and a pinned host-to-device copy of
  //    the bytes each size's lookup reads.
  {
    uint64_t read_max = 0;
    for (int t : options.token_counts)
      read_max = std::max(read_max, static_cast<uint64_t>(t) * static_cast<uint64_t>(table.head_count()) * table.row_bytes());
    DeviceBuffers buffers(compute);
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr source, buffers.make(read_max));
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr target, buffers.make(read_max));
    ENGRAM_RETURN_IF_ERROR(compute.fill_async(source, 0x5a, read_max, {}));
    ENGRAM_RETURN_IF_ERROR(compute.synchronize({}));
    ENGRAM_ASSIGN_OR_RETURN(auto pinned, PinnedHostBuffer::make(compute, read_max));
    for (int tokens : options.token_counts) {
      BenchCeilings c;
      c.tokens = tokens;
      c.read_bytes = static_cast<uint64_t>(tokens) * static_cast<uint64_t>(table.head_count()) * table.row_bytes();
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
  }

  // 3. Every placement asked for, through the runtime.
  struct Reached {
    Placement placement;
    std::string reason;
  };
  std::map<std::string, Reached> reached;  // by the flags asked with
  const SpecialRows special = find_special_rows(table, fill_seed);
  for (const PlacementOps& ops : placement_registry()) {
    const Placement asked = ops.id;
    if (std::find(options.placements.begin(), options.placements.end(), asked) == options.placements.end()) continue;
    BenchPlacementRow& asked_row = row_of(asked);
    if (asked_row.ran || !asked_row.not_run_reason.empty()) continue;
    auto gave_other = [&](const Reached& r) {
      return fmt::format("the plan gives {} for {} here ({})", placement_name(r.placement), asked_row.asked_with,
                         r.reason);
    };
    if (auto it = reached.find(asked_row.asked_with); it != reached.end()) {
      asked_row.not_run_reason = gave_other(it->second);
      continue;
    }
    RuntimeOptions runtime_options = options.runtime;
    runtime_options.config = config_for(asked, options.runtime.config);
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
    BenchPlacementRow& row = row_of(got);
    const bool wanted = std::find(options.placements.begin(), options.placements.end(), got) != options.placements.end();
    if (got != asked) asked_row.not_run_reason = gave_other(reached.at(asked_row.asked_with));
    if (!wanted || row.ran) {
      ENGRAM_RETURN_IF_ERROR(runtime->stop());
      continue;
    }
    row.not_run_reason.clear();
    row.build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    Status measured = [&]() -> Status {
      const std::string step = fmt::format("bench {}", placement_name(got));
      const uint64_t slots_max = static_cast<uint64_t>(tokens_max) * static_cast<uint64_t>(table.head_count());
      DeviceBuffers buffers(compute);
      ENGRAM_ASSIGN_OR_RETURN(DevicePtr ids_d, buffers.make(slots_max * 8));
      ENGRAM_ASSIGN_OR_RETURN(DevicePtr out_d, buffers.make(slots_max * static_cast<uint64_t>(table.dim) * 2));
      for (size_t i = 0; i < sizes; ++i) {
        const int tokens = options.token_counts[i];
        // The same ids for every placement: seeded by rank and size only.
        const LookupTestIds ids = make_lookup_test_ids(
            table, tokens, splitmix64_at(options.ids_seed, static_cast<uint64_t>(me) * 1000003 + tokens), special);
        ENGRAM_RETURN_IF_ERROR(compute.copy_to_device(ids_d, std::as_bytes(std::span<const int64_t>(ids.ids))));
        DeviceLookupRequest request;
        request.row_ids = ids_d;
        request.tokens = tokens;
        request.tokens_per_rank_max = tokens_max;
        request.output = out_d;
        if (!runtime->device_lookup_ready()) {
          // Not built for this layout: the lookup answers why, on every rank alike.
          const Status why = runtime->lookup_device(options.table_index, request);
          row.not_run_reason = why.is_ok() ? "the device lookup is not built for this layout" : why.message();
          return Status::ok();
        }
        // Eager, into a poisoned output, checked against the CPU reference.
        const uint64_t out_bytes = ids.ids.size() * static_cast<uint64_t>(table.dim) * 2;
        ENGRAM_RETURN_IF_ERROR(compute.fill_async(out_d, 0xff, out_bytes, request.stream));
        ENGRAM_RETURN_IF_ERROR(runtime->lookup_device(options.table_index, request));
        ENGRAM_RETURN_IF_ERROR(compute.synchronize(request.stream));
        std::vector<uint16_t> eager(ids.ids.size() * static_cast<size_t>(table.dim));
        ENGRAM_RETURN_IF_ERROR(compute.copy_to_host(std::as_writable_bytes(std::span<uint16_t>(eager)), out_d));
        const std::vector<int64_t> checked = slots_to_check(ids, options.sampled_slots);
        const std::vector<std::string> mismatches =
            check_against_cpu_reference(table, fill_seed, ids, checked, eager, 1);
        if (!mismatches.empty())
          return Status(ErrorCode::kInternal,
                        fmt::format("{} at {} tokens differs from the CPU reference: {}", placement_name(got), tokens,
                                    mismatches.front()),
                        {me, -1, step});
        row.slots_checked += static_cast<int64_t>(checked.size());
        // Timed: the ranks start together, as an engine's ranks do.
        ENGRAM_RETURN_IF_ERROR(world.barrier());
        BenchCell& cell = row.cells[i];
        ENGRAM_ASSIGN_OR_RETURN(cell.latency, capture_and_time(compute, [&](StreamRef s) {
                                  DeviceLookupRequest captured = request;
                                  captured.stream = s;
                                  return runtime->lookup_device(options.table_index, captured);
                                }, options.warmup_replays, options.timed_replays));
        cell.ran = true;
      }
      row.ran = true;
      return Status::ok();
    }();
    if (!measured.is_ok()) {
      runtime->stop().ignore();
      return measured;
    }
    ENGRAM_RETURN_IF_ERROR(runtime->stop());
  }

  // 4. The slowest rank's median of every figure, known to every rank.
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

}  // namespace engram
