#include "harness/acceptance_rank.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/base/bf16.h"
#include "core/base/splitmix64.h"
#include "core/model/table_fill.h"
#include "kernels/gather_reference.h"

namespace engram {
namespace {

// The device buffers of one rank's checks, given back on every path.
class DeviceBuffers {
 public:
  explicit DeviceBuffers(DeviceCompute& compute) : compute_(compute) {}
  ~DeviceBuffers() {
    for (DevicePtr p : owned_) compute_.free(p).ignore();
  }
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  Result<DevicePtr> make(uint64_t bytes) {
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr p, compute_.allocate(std::max<uint64_t>(bytes, 1)));
    owned_.push_back(p);
    return p;
  }

 private:
  DeviceCompute& compute_;
  std::vector<DevicePtr> owned_;
};

// A row of head `head` whose stored codes hold the value `wanted` asks for
// (scanned from the head's first row; the fill puts special codes in one row
// of four, so a few rows suffice). -1 when none is found near the start.
int64_t find_row(const TableSpec& table, uint64_t fill_seed, int head, bool (*wanted)(const TableSpec&, const std::byte*)) {
  std::vector<std::byte> row(table.row_bytes());
  const int64_t first = table.head_offset(head);
  const int64_t last = first + std::min<int64_t>(table.primes[static_cast<size_t>(head)], 4096);
  for (int64_t r = first; r < last; ++r) {
    fill_table_rows(table, fill_seed, r, row);
    if (wanted(table, row.data())) return r;
  }
  return -1;
}

bool holds_negative_zero(const TableSpec& table, const std::byte* row) {
  for (int v = 0; v < table.dim; ++v) {
    if (table.row_format == RowFormat::kFp8E4M3Ue8m0 ? static_cast<uint8_t>(row[v]) == 0x80
                                                     : (static_cast<uint8_t>(row[2 * v]) == 0x00 &&
                                                        static_cast<uint8_t>(row[2 * v + 1]) == 0x80))
      return true;
  }
  return false;
}

bool holds_nan(const TableSpec& table, const std::byte* row) {
  for (int v = 0; v < table.dim; ++v) {
    if (table.row_format == RowFormat::kFp8E4M3Ue8m0) {
      if ((static_cast<uint8_t>(row[v]) & 0x7f) == 0x7f) return true;
    } else {
      const uint16_t b = static_cast<uint16_t>(static_cast<uint8_t>(row[2 * v]) |
                                               (static_cast<uint16_t>(static_cast<uint8_t>(row[2 * v + 1])) << 8));
      if ((b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0) return true;
    }
  }
  return false;
}

// Ids [tokens][heads]: rows of each head's own range (as the hash gives),
// with DEAD ids, out-of-table ids and the -0 and NaN rows at fixed strides.
struct SlotKinds {
  std::vector<int64_t> ids;
  std::vector<int64_t> special_slots;  // always checked against the reference
};

SlotKinds make_ids(const TableSpec& table, int tokens, uint64_t seed, int64_t zero_row_of_head0,
                   int64_t nan_row_of_head0) {
  const int heads = table.head_count();
  SlotKinds out;
  out.ids.resize(static_cast<size_t>(tokens) * static_cast<size_t>(heads));
  for (int64_t s = 0; s < static_cast<int64_t>(out.ids.size()); ++s) {
    const int h = static_cast<int>(s % heads);
    const uint64_t draw = splitmix64_at(seed, static_cast<uint64_t>(s));
    int64_t id = table.head_offset(h) + static_cast<int64_t>(draw % static_cast<uint64_t>(table.primes[static_cast<size_t>(h)]));
    bool special = true;
    switch (s % 97) {
      case 0: id = kDeadId; break;
      case 1: id = table.row_count() + static_cast<int64_t>(draw % 1000); break;  // out of the table
      case 2: id = -2 - static_cast<int64_t>(draw % 1000); break;                  // negative, not DEAD
      case 3: if (h == 0 && zero_row_of_head0 >= 0) id = zero_row_of_head0; else special = false; break;
      case 4: if (h == 0 && nan_row_of_head0 >= 0) id = nan_row_of_head0; else special = false; break;
      default: special = false;
    }
    out.ids[static_cast<size_t>(s)] = id;
    if (special) out.special_slots.push_back(s);
  }
  return out;
}

// The CPU reference of one slot: the row the fill writes, dequantised by the
// kernels' CPU rule; zeros for DEAD and out-of-table ids.
void reference_slot(const TableSpec& table, uint64_t fill_seed, int64_t id, std::span<uint16_t> out,
                    std::vector<std::byte>& row) {
  if (id < 0 || id >= table.row_count()) {
    std::fill(out.begin(), out.end(), uint16_t{0});
    return;
  }
  row.resize(table.row_bytes());
  fill_table_rows(table, fill_seed, id, row);
  kernels::row_reference(table, row, out);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

std::string first_byte_difference(std::span<const uint16_t> a, std::span<const uint16_t> b, int dim) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i])
      return fmt::format("slot {} element {}: 0x{:04x} vs 0x{:04x}", i / static_cast<size_t>(dim),
                         i % static_cast<size_t>(dim), a[i], b[i]);
  return {};
}

}  // namespace

bool AcceptanceReport::passed() const {
  for (const AcceptanceRow& r : rows)
    if (!r.mismatches.empty()) return false;
  return !rows.empty();
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
  if (backend.compute == nullptr)
    return Status(ErrorCode::kFailedPrecondition,
                  "the acceptance test looks up on this rank's GPU, but the rank has none (start one process per GPU; "
                  "check CUDA_VISIBLE_DEVICES and LOCAL_RANK)",
                  {me, -1, "acceptance"});
  const int tokens_max = *std::max_element(options.token_counts.begin(), options.token_counts.end());
  options.runtime.config.tokens_per_rank_max = std::max(options.runtime.config.tokens_per_rank_max, tokens_max);
  options.runtime.collective_cross_check = true;  // device_peer only: both paths over the same shards
  const ModelSpec& model = options.runtime.table_model;
  const uint64_t fill_seed = options.runtime.fill_seed;

  const auto start = std::chrono::steady_clock::now();
  ENGRAM_ASSIGN_OR_RETURN(auto runtime, EngramRuntime::start(backend, options.runtime, sink));
  report.build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.placement = runtime->placement();
  const bool cross = report.placement == Placement::kDevicePeer;
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
    std::vector<std::byte> row;
    for (int t = 0; t < static_cast<int>(model.tables.size()); ++t) {
      const TableSpec& table = model.tables[static_cast<size_t>(t)];
      const int64_t zero_row = find_row(table, fill_seed, 0, holds_negative_zero);
      const int64_t nan_row = find_row(table, fill_seed, 0, holds_nan);
      for (int tokens : options.token_counts) {
        AcceptanceRow r;
        r.table_index = t;
        r.layer_id = table.layer_id;
        r.tokens = tokens;
        const SlotKinds kinds = make_ids(table, tokens, splitmix64_at(options.ids_seed, static_cast<uint64_t>(me) * 1000003 + t * 8191 + tokens),
                                         zero_row, nan_row);
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
        std::vector<int64_t> checked = kinds.special_slots;
        const int64_t step = std::max<int64_t>(1, r.slots / std::max(1, options.sampled_slots));
        for (int64_t s = 0; s < r.slots && static_cast<int>(checked.size()) < options.sampled_slots + static_cast<int>(kinds.special_slots.size()); s += step)
          checked.push_back(s);
        std::sort(checked.begin(), checked.end());
        checked.erase(std::unique(checked.begin(), checked.end()), checked.end());
        std::vector<uint16_t> want(static_cast<size_t>(table.dim));
        for (int64_t s : checked) {
          reference_slot(table, fill_seed, kinds.ids[static_cast<size_t>(s)], want, row);
          const std::span<const uint16_t> got(eager.data() + s * table.dim, static_cast<size_t>(table.dim));
          for (int e = 0; e < table.dim; ++e) {
            if (bf16_same(want[static_cast<size_t>(e)], got[static_cast<size_t>(e)])) continue;
            r.mismatches.push_back(fmt::format("eager vs CPU reference: slot {} (id {}) element {}: want 0x{:04x}, got 0x{:04x}",
                                               s, kinds.ids[static_cast<size_t>(s)], e, want[static_cast<size_t>(e)],
                                               got[static_cast<size_t>(e)]));
            break;
          }
          if (r.mismatches.size() >= 4) break;
        }
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
        ENGRAM_ASSIGN_OR_RETURN(std::vector<double> us, graph->time(options.warmup_replays, options.timed_replays));
        r.latency_us_p10 = percentile(us, 0.10);
        r.latency_us_p50 = percentile(us, 0.50);
        r.latency_us_p90 = percentile(us, 0.90);
        report.rows.push_back(std::move(r));
      }
    }
    return Status::ok();
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

}  // namespace engram
