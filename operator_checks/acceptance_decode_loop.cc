#include "operator_checks/acceptance_decode_loop.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "core/base/splitmix64.h"
#include "core/lookup/device_request_hasher.h"
#include "core/model/request_hasher.h"
#include "operator_checks/device_buffers.h"
#include "operator_checks/lookup_checks.h"
#include "operator_checks/replay_timing.h"

namespace engram::operator_checks {
namespace {

constexpr size_t kMismatchesMax = 8;

// One table's hashers (device and CPU) and its lookup output.
struct TableLoop {
  const TableSpec* table = nullptr;
  std::unique_ptr<DeviceRequestHasher> device;
  std::unique_ptr<RequestHasher> cpu;
  DevicePtr output = 0;  // bf16 [bucket][heads][dim]
};

// A step's batch: each active request's tokens (a prefill chunk or one
// decode token), an idle slot's token and padding.
struct Batch {
  std::vector<int64_t> tokens;
  std::vector<RequestRun> runs;
  int64_t request_tokens = 0;
};

}  // namespace

Status run_decode_loop(EngramRuntime& runtime, DeviceCompute& compute, const ModelSpec& model,
                       const DecodeLoopOptions& o, int world_rank, DecodeLoopReport& report) {
  if (o.steps <= 0) return Status::ok();
  auto bad = [world_rank](std::string what) {
    return Status(ErrorCode::kInvalidArgument, "decode loop: " + std::move(what), {world_rank, -1, "acceptance"});
  };
  // Each step holds every request's token and an idle one; the prefill step a chunk each.
  if (o.requests < 1 || o.bucket_tokens < 2 * o.requests + 2 || o.bucket_tokens > o.tokens_per_rank_max)
    return bad(fmt::format("requests {} and bucket_tokens {} must give every request two tokens and an idle slot "
                           "one (bucket >= 2 x requests + 2), within tokens_per_rank_max {}",
                           o.requests, o.bucket_tokens, o.tokens_per_rank_max));
  report = DecodeLoopReport{};
  report.steps = o.steps;
  report.requests = o.requests;
  report.tables = static_cast<int>(model.tables.size());
  const int slot_count = o.requests + 1;  // a spare: a request that ends is replaced on it
  const int64_t bucket = o.bucket_tokens;

  DeviceBuffers buffers(compute);
  std::vector<TableLoop> loops(model.tables.size());
  for (size_t t = 0; t < loops.size(); ++t) {
    TableLoop& l = loops[t];
    l.table = &model.tables[t];
    ENGRAM_ASSIGN_OR_RETURN(TableHasher hasher, TableHasher::create(model, static_cast<int>(t)));
    DeviceRequestHasherOptions options;
    options.slot_count = slot_count;
    options.tokens_max = bucket;
    options.verify_tokens_max = 1;
    ENGRAM_ASSIGN_OR_RETURN(l.device, DeviceRequestHasher::create(compute, hasher, options));
    ENGRAM_ASSIGN_OR_RETURN(RequestHasher cpu, RequestHasher::create(std::move(hasher), slot_count));
    l.cpu = std::make_unique<RequestHasher>(std::move(cpu));
    ENGRAM_ASSIGN_OR_RETURN(l.output, buffers.make(static_cast<uint64_t>(bucket) *
                                                   static_cast<uint64_t>(l.table->head_count()) *
                                                   static_cast<uint64_t>(l.table->dim) * 2));
  }
  // One graph for the whole step: every table's hash, then its lookup of
  // the hasher's ids, on one stream.
  ENGRAM_ASSIGN_OR_RETURN(auto graph, compute.capture([&](StreamRef stream) -> Status {
    for (size_t t = 0; t < loops.size(); ++t) {
      ENGRAM_RETURN_IF_ERROR(loops[t].device->enqueue_extend(stream, bucket));
      DeviceLookupRequest request;
      request.row_ids = loops[t].device->row_ids();
      request.tokens = bucket;
      request.tokens_per_rank_max = o.tokens_per_rank_max;
      request.output = loops[t].output;
      request.stream = stream;
      ENGRAM_RETURN_IF_ERROR(runtime.lookup_device(static_cast<int>(t), request));
    }
    return Status::ok();
  }));

  uint64_t rng = splitmix64_at(o.seed, static_cast<uint64_t>(world_rank) * 7919 + 17);
  auto below = [&rng](uint64_t n) { return splitmix64_next(rng) % n; };
  auto token = [&]() -> int64_t {
    return below(8) == 0 ? kDeadId : static_cast<int64_t>(below(static_cast<uint64_t>(model.compressed_vocab_size)));
  };
  auto ids_of = [&](size_t n) {
    std::vector<int64_t> ids(n);
    for (int64_t& v : ids) v = static_cast<int64_t>(below(static_cast<uint64_t>(model.compressed_vocab_size)));
    return ids;
  };
  auto begin_everywhere = [&](int slot, const std::vector<int64_t>& preceding) -> Status {
    for (TableLoop& l : loops) {
      ENGRAM_RETURN_IF_ERROR(l.device->begin(slot, preceding));
      ENGRAM_RETURN_IF_ERROR(l.cpu->begin(slot, preceding));
    }
    return Status::ok();
  };
  // Requests begin fresh, from a cached prefix, or from lookback ids.
  std::vector<int> active;
  for (int r = 0; r < o.requests; ++r) {
    ENGRAM_RETURN_IF_ERROR(begin_everywhere(r, r % 3 == 0 ? std::vector<int64_t>{}
                                               : r % 3 == 1 ? ids_of(2 + below(8)) : ids_of(3)));
    active.push_back(r);
  }
  int spare = o.requests;
  std::vector<uint8_t> prefilling(static_cast<size_t>(slot_count), 1);

  for (int step = 0; step < o.steps; ++step) {
    if (step == o.steps / 2 && step > 0) {
      // The first request ends; a request handed over with its lookback ids takes the spare slot.
      const int ended = active.front();
      for (TableLoop& l : loops) {
        ENGRAM_RETURN_IF_ERROR(l.device->release(ended));
        ENGRAM_RETURN_IF_ERROR(l.cpu->release(ended));
      }
      ENGRAM_RETURN_IF_ERROR(begin_everywhere(spare, ids_of(3)));
      active.erase(active.begin());
      active.push_back(spare);
      prefilling[static_cast<size_t>(spare)] = 1;
      spare = ended;
    }
    Batch batch;
    const int64_t chunk_max = std::max<int64_t>(1, (bucket - 2) / o.requests);
    const size_t idle_at = static_cast<size_t>(below(active.size() + 1));
    for (size_t i = 0; i <= active.size(); ++i) {
      if (i == idle_at) {
        batch.runs.push_back(RequestRun{kIdleSlot, static_cast<int64_t>(batch.tokens.size()), 1});
        batch.tokens.push_back(token());
      }
      if (i == active.size()) break;
      const int slot = active[i];
      const int64_t n = prefilling[static_cast<size_t>(slot)] ? 1 + static_cast<int64_t>(below(static_cast<uint64_t>(chunk_max))) : 1;
      prefilling[static_cast<size_t>(slot)] = 0;
      batch.runs.push_back(RequestRun{slot, static_cast<int64_t>(batch.tokens.size()), n});
      for (int64_t k = 0; k < n; ++k) batch.tokens.push_back(token());
      batch.request_tokens += n;
    }
    report.request_tokens += batch.request_tokens;

    std::vector<std::vector<int64_t>> want(loops.size());
    for (size_t t = 0; t < loops.size(); ++t) {
      const size_t heads = static_cast<size_t>(loops[t].table->head_count());
      want[t].assign(static_cast<size_t>(bucket) * heads, kDeadId);  // padding past the step: DEAD
      ENGRAM_RETURN_IF_ERROR(loops[t].device->stage_extend(batch.tokens, batch.runs));
      ENGRAM_RETURN_IF_ERROR(
          loops[t].cpu->extend(batch.tokens, batch.runs, std::span(want[t]).first(batch.tokens.size() * heads)));
    }
    ENGRAM_RETURN_IF_ERROR(graph->replay());
    for (size_t t = 0; t < loops.size(); ++t) {
      const TableSpec& table = *loops[t].table;
      const size_t heads = static_cast<size_t>(table.head_count());
      auto mismatch = [&](std::string text) {
        if (report.mismatches.size() < kMismatchesMax)
          report.mismatches.push_back(fmt::format("step {} layer {}: {}", step, table.layer_id, text));
      };
      if (Status device = loops[t].device->check_device_errors(); !device.is_ok()) mismatch(device.to_string());
      std::vector<int64_t> got(want[t].size());
      ENGRAM_RETURN_IF_ERROR(compute.copy_to_host(std::as_writable_bytes(std::span(got)), loops[t].device->row_ids()));
      for (size_t k = 0; k < got.size(); ++k)
        if (got[k] != want[t][k]) {
          mismatch(fmt::format("token {} head {}: the device hasher gave id {}, the CPU RequestHasher {}", k / heads,
                               k % heads, got[k], want[t][k]));
          break;
        }
      report.ids_checked += static_cast<int64_t>(got.size());
      std::vector<uint16_t> rows(want[t].size() * static_cast<size_t>(table.dim));
      ENGRAM_RETURN_IF_ERROR(compute.copy_to_host(std::as_writable_bytes(std::span(rows)), loops[t].output));
      LookupTestIds expected;
      expected.ids = want[t];
      std::vector<int64_t> slots(want[t].size());
      for (size_t s = 0; s < slots.size(); ++s) slots[s] = static_cast<int64_t>(s);
      for (const std::string& m : check_against_cpu_reference(table, o.fill_seed, expected, slots, rows, 2))
        mismatch("lookup of the hashed ids vs the CPU reference: " + m);
      report.slots_checked += static_cast<int64_t>(slots.size());
    }
  }
  ENGRAM_ASSIGN_OR_RETURN(const LatencyPercentiles latency, time_replays(*graph, o.warmup_replays, o.timed_replays));
  report.latency_us_p50 = latency.p50_us;
  report.ran = true;
  graph.reset();
  for (TableLoop& l : loops) ENGRAM_RETURN_IF_ERROR(l.device->free());
  return Status::ok();
}

std::string format_decode_loop(int rank, Placement placement, const DecodeLoopReport& r) {
  std::string text = fmt::format("rank {} {} decode loop: ", rank, placement_name(placement));
  if (!r.ran) return text + "not run";
  text += r.mismatches.empty() ? "PASS" : "FAIL";
  text += fmt::format(": {} steps x {} requests, {} tables, one graph (hash + lookup) replayed per step: {} ids "
                      "checked against the CPU RequestHasher, {} slots against the CPU reference; {} request tokens; "
                      "replay p50 {:.1f} us",
                      r.steps, r.requests, r.tables, r.ids_checked, r.slots_checked, r.request_tokens,
                      r.latency_us_p50);
  for (const std::string& m : r.mismatches) text += "\n    " + m;
  return text;
}

}  // namespace engram::operator_checks
