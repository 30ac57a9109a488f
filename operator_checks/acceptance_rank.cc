#include "operator_checks/acceptance_rank.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/base/splitmix64.h"
#include "operator_checks/device_buffers.h"
#include "operator_checks/lookup_checks.h"
#include "operator_checks/replay_timing.h"

namespace engram::operator_checks {

bool AcceptanceReport::passed() const {
  for (const AcceptanceRow& r : rows)
    if (!r.mismatches.empty()) return false;
  return !rows.empty() && decode.mismatches.empty();
}

Status run_acceptance_rank(RankBackend& backend, AcceptanceOptions options, WarningSink& sink,
                           AcceptanceReport& report) {
  const int me = backend.world_rank;
  report.rank = me;
  auto invalid = [me](std::string what) { return Status(ErrorCode::kInvalidArgument, std::move(what), {me, -1, "acceptance"}); };
  if (options.token_counts.empty()) return invalid("--tokens: give at least one token count, e.g. --tokens 1,64,1024,8192");
  for (int t : options.token_counts)
    if (t < 1) return invalid(fmt::format("--tokens: {} is not a positive token count", t));
  if (options.sampled_slots < 0 || options.timed_replays < 1 || options.warmup_replays < 0)
    return invalid("--samples must be >= 0, --replays >= 1");
  if (options.decode_steps < 0) return invalid("--decode-steps must be >= 0 (0: no decode loop)");
  if (backend.compute == nullptr)
    return Status(ErrorCode::kFailedPrecondition,
                  "the acceptance test looks up on this rank's GPU, but the rank has none (start one process per GPU; "
                  "check CUDA_VISIBLE_DEVICES and LOCAL_RANK)",
                  {me, -1, "acceptance"});
  const int tokens_max = *std::max_element(options.token_counts.begin(), options.token_counts.end());
  options.runtime.config.tokens_per_rank_max = std::max(options.runtime.config.tokens_per_rank_max, tokens_max);
  if (options.decode_steps > 0)
    options.runtime.config.tokens_per_rank_max =
        std::max(options.runtime.config.tokens_per_rank_max, options.decode_bucket_tokens);
  options.runtime.collective_cross_check = true;  // device_peer only: both paths over the same shards
  const uint64_t fill_seed = options.runtime.fill_seed;

  const auto start = std::chrono::steady_clock::now();
  ENGRAM_ASSIGN_OR_RETURN(auto runtime, EngramRuntime::start(backend, options.runtime, sink));
  // The tables as the runtime decodes them (the engine's scale-byte and -0
  // rules on this rank's path): what the CPU reference must read them by.
  const ModelSpec& model = runtime->table_model();
  report.build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.placement = runtime->placement();
  report.device_bytes = runtime->facts().device_bytes;
  report.host_fill_seconds = runtime->facts().host_fill_seconds;
  report.device_register_seconds = runtime->facts().device_register_seconds;
  report.handle_type = runtime->facts().handle_type;
  // device_peer's collective cross-check, unless ranks share a GPU (no NCCL
  // there): then every slot is checked against the CPU reference instead.
  const bool cross = runtime->collective_cross_check_built();
  report.every_slot_vs_cpu = placement_ops(report.placement).has_collective_cross_check && !cross;
  DeviceCompute& compute = *backend.compute;

  Status status = [&]() -> Status {
    int heads_max = 0, dim_max = 0;
    for (const TableSpec& t : model.tables) {
      heads_max = std::max(heads_max, t.head_count());
      dim_max = std::max(dim_max, t.dim);
    }
    const uint64_t slots_max = static_cast<uint64_t>(tokens_max) * static_cast<uint64_t>(heads_max);
    DeviceBuffers buffers(compute);
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr ids_d, buffers.make(slots_max * 8));
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr out_d, buffers.make(slots_max * static_cast<uint64_t>(dim_max) * 2));
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr cross_d, buffers.make(slots_max * static_cast<uint64_t>(dim_max) * 2));
    for (int t = 0; t < static_cast<int>(model.tables.size()); ++t) {
      const TableSpec& table = model.tables[static_cast<size_t>(t)];
      const SpecialRows special = find_special_rows(table, fill_seed);
      for (int tokens : options.token_counts) {
        AcceptanceRow r;
        r.table_index = t;
        r.layer_id = table.layer_id;
        r.tokens = tokens;
        const LookupTestIds kinds = make_lookup_test_ids(
            table, tokens, splitmix64_at(options.ids_seed, static_cast<uint64_t>(me) * 1000003 + t * 8191 + tokens),
            special);
        r.slots = static_cast<int64_t>(kinds.ids.size());
        const uint64_t out_bytes = kinds.ids.size() * static_cast<uint64_t>(table.dim) * 2;
        ENGRAM_RETURN_IF_ERROR(compute.copy_to_device(ids_d, std::as_bytes(std::span<const int64_t>(kinds.ids))));
        DeviceLookupRequest request;
        request.row_ids = ids_d;
        request.tokens = tokens;
        request.tokens_per_rank_max = tokens_max;
        request.output = out_d;
        auto download = [&](DevicePtr from) -> Result<std::vector<uint16_t>> {
          std::vector<uint16_t> host(kinds.ids.size() * static_cast<size_t>(table.dim));
          ENGRAM_RETURN_IF_ERROR(compute.copy_to_host(std::as_writable_bytes(std::span<uint16_t>(host)), from));
          return host;
        };

        // Eager: poison the output first, so a slot the lookup skipped shows.
        ENGRAM_RETURN_IF_ERROR(compute.fill_async(out_d, 0xff, out_bytes, request.stream));
        ENGRAM_RETURN_IF_ERROR(runtime->lookup_device(t, request));
        ENGRAM_RETURN_IF_ERROR(compute.synchronize(request.stream));
        ENGRAM_ASSIGN_OR_RETURN(std::vector<uint16_t> eager, download(out_d));

        // Sampled slots (evenly spread) and every special slot against the CPU reference.
        const std::vector<int64_t> checked = slots_to_check(
            kinds, report.every_slot_vs_cpu ? static_cast<int>(kinds.ids.size()) : options.sampled_slots);
        for (std::string& m : check_against_cpu_reference(table, fill_seed, kinds, checked, eager))
          r.mismatches.push_back("eager vs CPU reference: " + m);
        r.slots_checked = static_cast<int64_t>(checked.size());

        // device_peer: the collective over the same shards, every slot.
        if (cross) {
          DeviceLookupRequest other = request;
          other.output = cross_d;
          ENGRAM_RETURN_IF_ERROR(compute.fill_async(cross_d, 0xff, out_bytes, request.stream));
          ENGRAM_RETURN_IF_ERROR(runtime->lookup_device_collective(t, other));
          ENGRAM_RETURN_IF_ERROR(compute.synchronize(request.stream));
          ENGRAM_ASSIGN_OR_RETURN(std::vector<uint16_t> collective, download(cross_d));
          const std::string diff = first_byte_difference(eager, collective, table.dim);
          if (!diff.empty()) r.mismatches.push_back("device_peer vs device_collective (eager): " + diff);
          r.cross_checked = true;
        }

        // Graph replay: the same lookup captured once, replayed, bitwise equal
        // to the eager output; then timed.
        ENGRAM_RETURN_IF_ERROR(compute.fill_async(out_d, 0xff, out_bytes, request.stream));
        ENGRAM_RETURN_IF_ERROR(compute.synchronize(request.stream));
        ENGRAM_ASSIGN_OR_RETURN(auto graph, compute.capture([&](StreamRef stream) {
                                  DeviceLookupRequest captured = request;
                                  captured.stream = stream;
                                  return runtime->lookup_device(t, captured);
                                }));
        ENGRAM_RETURN_IF_ERROR(graph->replay());
        ENGRAM_ASSIGN_OR_RETURN(std::vector<uint16_t> replayed, download(out_d));
        if (const std::string diff = first_byte_difference(eager, replayed, table.dim); !diff.empty())
          r.mismatches.push_back("graph replay vs eager: " + diff);
        if (cross) {
          ENGRAM_RETURN_IF_ERROR(compute.fill_async(cross_d, 0xff, out_bytes, request.stream));
          ENGRAM_RETURN_IF_ERROR(compute.synchronize(request.stream));
          ENGRAM_ASSIGN_OR_RETURN(auto collective_graph, compute.capture([&](StreamRef stream) {
                                    DeviceLookupRequest captured = request;
                                    captured.output = cross_d;
                                    captured.stream = stream;
                                    return runtime->lookup_device_collective(t, captured);
                                  }));
          ENGRAM_RETURN_IF_ERROR(collective_graph->replay());
          ENGRAM_ASSIGN_OR_RETURN(std::vector<uint16_t> collective, download(cross_d));
          if (const std::string diff = first_byte_difference(replayed, collective, table.dim); !diff.empty())
            r.mismatches.push_back("device_peer vs device_collective (graph replay): " + diff);
        }
        ENGRAM_ASSIGN_OR_RETURN(const LatencyPercentiles latency,
                                time_replays(*graph, options.warmup_replays, options.timed_replays));
        r.latency_us_p10 = latency.p10_us;
        r.latency_us_p50 = latency.p50_us;
        r.latency_us_p90 = latency.p90_us;
        report.rows.push_back(std::move(r));
      }
    }
    DecodeLoopOptions decode;
    decode.steps = options.decode_steps;
    decode.requests = options.decode_requests;
    decode.bucket_tokens = options.decode_bucket_tokens;
    decode.seed = options.ids_seed;
    decode.fill_seed = fill_seed;
    decode.tokens_per_rank_max = options.runtime.config.tokens_per_rank_max;
    decode.warmup_replays = options.warmup_replays;
    decode.timed_replays = options.timed_replays;
    return run_decode_loop(*runtime, compute, model, decode, me, report.decode);
  }();
  if (!status.is_ok()) {
    runtime->stop().ignore();
    return status;
  }
  return runtime->stop();
}

std::string format_acceptance_row(const AcceptanceReport& report, const AcceptanceRow& row) {
  std::string text = fmt::format("rank {} {} layer {} tokens {}: ", report.rank, placement_name(report.placement),
                                 row.layer_id, row.tokens);
  if (row.mismatches.empty()) {
    text += fmt::format("ok, {} of {} slots vs the CPU reference{}, graph replay = eager", row.slots_checked,
                        row.slots, row.cross_checked ? ", every slot vs device_collective" : "");
  } else {
    text += "MISMATCH";
    for (const std::string& m : row.mismatches) text += "\n    " + m;
  }
  text += fmt::format("; p10/p50/p90 {:.1f}/{:.1f}/{:.1f} us", row.latency_us_p10, row.latency_us_p50,
                      row.latency_us_p90);
  return text;
}

}  // namespace engram::operator_checks
