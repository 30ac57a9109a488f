#include "backends/cuda/lookup_bench.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "backends/cuda/cuda_device_memory.h"
#include "backends/cuda/cuda_driver.h"
#include "backends/cuda/gpu_buffer.h"
#include "backends/cuda/graph_timing.h"
#include "backends/cuda/local_peer_shards.h"
#include "backends/cuda/nccl_collectives.h"
#include "core/base/bf16.h"
#include "core/model/row_format.h"
#include "core/lookup/shard_layout.h"
#include "core/base/splitmix64.h"
#include "core/model/table_spec.h"
#include "core/base/units.h"
#include "kernels/bench_kernels.h"
#include "kernels/gather_kernels.h"
#include "kernels/gather_peer_variants.h"

namespace engram::cuda {
namespace {

Status rt(cudaError_t error, const std::string& call, int gpu) { return cuda_runtime_status(error, call, gpu, "bench"); }

Result<std::vector<uint16_t>> download(const GpuBuffer& b, int gpu) {
  std::vector<uint16_t> host(b.bytes() / 2);
  ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(gpu), "cudaSetDevice", gpu));
  ENGRAM_RETURN_IF_ERROR(rt(cudaMemcpy(host.data(), b.get(), b.bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H", gpu));
  return host;
}

}  // namespace

Result<LookupBenchReport> run_lookup_bench(const LookupBenchOptions& o,
                                           const std::function<void(std::string_view)>& log) {
  auto say = [&](const std::string& line) { if (log) log(line); };
  if (o.replays < 1 || o.warmup_replays < 0) {
    return invalid_argument(fmt::format("bench: replays {} must be >= 1 and warm-up {} >= 0", o.replays,
                                        o.warmup_replays));
  }
  if (o.tokens_per_rank.empty()) return invalid_argument("bench: no token sizes; give e.g. --tokens 1,64,8192");
  for (int64_t t : o.tokens_per_rank) {
    if (t < 1) return invalid_argument(fmt::format("bench: tokens per rank {} must be >= 1", t));
  }
  if (o.dim != 256 || o.heads < 1) {
    return invalid_argument(fmt::format("bench: dim {} must be 256 (the V4.1 row) and heads {} >= 1", o.dim, o.heads));
  }
  if (!(o.dead_fraction >= 0 && o.dead_fraction < 1)) {
    return invalid_argument(fmt::format("bench: dead_fraction {} must be in [0, 1)", o.dead_fraction));
  }
  const GpuPresence presence = gpu_presence();
  if (presence.count == 0) return failed_precondition("bench: no GPU: " + presence.reason);
  const int gpus = o.gpus == 0 ? presence.count : o.gpus;
  if (gpus < 1 || gpus > presence.count) {
    return invalid_argument(fmt::format("bench: {} GPUs asked for; this process sees {}", o.gpus, presence.count));
  }
  // NVLink multicast off unless the caller decided otherwise: on shared hosts
  // it can take the GPUs out of service.
  setenv("NCCL_NVLS_ENABLE", "0", 0);

  const uint64_t row_bytes = row_bytes_for(RowFormat::kFp8E4M3Ue8m0, o.dim);
  const int64_t rows_per_shard = static_cast<int64_t>(o.shard_bytes / row_bytes);
  if (rows_per_shard < 1) return invalid_argument(fmt::format("bench: shard of {} bytes holds no row", o.shard_bytes));
  const int64_t table_rows = rows_per_shard * gpus;
  LookupBenchReport report;
  report.gpus = gpus;
  report.table_rows = table_rows;
  report.row_bytes = row_bytes;
  {
    cudaDeviceProp prop{};
    ENGRAM_RETURN_IF_ERROR(rt(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties", 0));
    report.device_name = prop.name;
  }

  say(fmt::format("bench: {} GPU(s), table of {} rows x {} B = {} ({} per GPU); filling on device",
                  gpus, table_rows, row_bytes, format_gib(static_cast<uint64_t>(table_rows) * row_bytes),
                  format_gib(static_cast<uint64_t>(rows_per_shard) * row_bytes)));
  LocalPeerShards table(gpus, table_rows, row_bytes);
  ENGRAM_RETURN_IF_ERROR(table.build([&](int g, DevicePtr shard) {
    ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(g), "cudaSetDevice", g));
    kernels::ShardFillArgs fill;
    fill.shard = reinterpret_cast<uint8_t*>(shard);
    fill.first_row = table.layout().shard_begin(g);
    fill.rows = table.layout().shard_rows(g);
    fill.row_bytes = row_bytes;
    fill.dim = o.dim;
    fill.seed = o.seed;
    return kernels::fill_shard(fill, nullptr).with_context(g, -1, "fill");
  }));
  report.shard_bytes = table.allocation_bytes();
  say("bench: shards filled, exported as POSIX fds, imported and mapped by every GPU");

  std::vector<int> all_gpus;
  for (int g = 0; g < gpus; ++g) all_gpus.push_back(g);
  ENGRAM_ASSIGN_OR_RETURN(auto timer_owner, GraphTimer::create(all_gpus, o.replays, o.warmup_replays, o.cold_l2));
  GraphTimer& timer = *timer_owner;

  std::vector<std::unique_ptr<NcclCommunicator>> comms;
  {
    std::vector<int> devices;
    for (int g = 0; g < gpus; ++g) devices.push_back(g);
    auto made = NcclCommunicator::create_local_group(devices);
    if (made.is_ok()) {
      comms = std::move(*made);
    } else {
      report.notes.push_back("collective path not measured: " + made.status().to_string());
      say("bench: " + report.notes.back());
    }
  }

  kernels::RowLayout layout;
  layout.format = RowFormat::kFp8E4M3Ue8m0;
  layout.dim = o.dim;
  layout.row_bytes = row_bytes;
  const RowShardLayout& shards = table.layout();

  // The method's fixed cost: an empty graph and a one-empty-kernel graph per
  // GPU, launched and timed exactly as the lookups are.
  {
    auto time_graph = [&](const std::function<Status()>& enqueue) -> Result<LatencyPercentiles> {
      ENGRAM_ASSIGN_OR_RETURN(GpuGraphs graphs, timer.capture(enqueue));
      ENGRAM_ASSIGN_OR_RETURN(auto us, timer.time([&] { return timer.launch(graphs); }));
      return latency_percentiles(us);
    };
    ENGRAM_ASSIGN_OR_RETURN(auto events_only_us, timer.time([] { return Status::ok(); }));
    ENGRAM_ASSIGN_OR_RETURN(report.events_only, latency_percentiles(events_only_us));
    auto empty = time_graph([] { return Status::ok(); });
    if (empty.is_ok()) {
      report.empty_graph = *empty;
      report.empty_graph_ran = true;
    } else {
      for (int g = 0; g < gpus; ++g) {
        cudaSetDevice(g);
        cudaGetLastError();
      }
      report.notes.push_back("empty graph not timed: " + empty.status().to_string());
      say("bench: " + report.notes.back());
    }
    ENGRAM_ASSIGN_OR_RETURN(report.empty_kernel_graph, time_graph([&]() -> Status {
      for (int g = 0; g < gpus; ++g) {
        ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(g), "cudaSetDevice", g));
        ENGRAM_RETURN_IF_ERROR(kernels::empty_kernel(timer.stream(static_cast<size_t>(g))));
      }
      return Status::ok();
    }));
  }

  for (int64_t tokens : o.tokens_per_rank) {
    LookupBenchPoint point;
    point.tokens_per_rank = tokens;
    const uint64_t slots = static_cast<uint64_t>(tokens) * static_cast<uint64_t>(o.heads);
    point.read_bytes = slots * row_bytes;
    point.write_bytes = slots * static_cast<uint64_t>(o.dim) * 2;
    say(fmt::format("bench: {} tokens per rank ({} rows per GPU)", tokens, slots));

    // Seeded ids per rank over the whole table, a few DEAD.
    std::vector<std::vector<int64_t>> ids(static_cast<size_t>(gpus));
    for (int g = 0; g < gpus; ++g) {
      uint64_t rng = o.seed ^ (static_cast<uint64_t>(tokens) << 20) ^ (static_cast<uint64_t>(g) << 8);
      for (uint64_t i = 0; i < slots; ++i) {
        const double u = static_cast<double>(splitmix64_next(rng) >> 11) * 0x1p-53;
        const uint64_t row = splitmix64_next(rng) % static_cast<uint64_t>(table_rows);
        ids[g].push_back(u < o.dead_fraction ? kDeadId : static_cast<int64_t>(row));
      }
    }
    uint64_t remote = 0, local = 0;
    for (int64_t id : ids[0]) {
      if (id == kDeadId) continue;
      (shards.owner_of(id) == 0 ? local : remote) += 1;
    }
    point.remote_fraction = static_cast<double>(remote) / static_cast<double>(slots);
    point.local_fraction = static_cast<double>(local) / static_cast<double>(slots);

    std::vector<GpuBuffer> d_ids, d_all_ids, d_owned, d_result, d_peer_out, d_copy_out, d_variant_out;
    for (int g = 0; g < gpus; ++g) {
      ENGRAM_ASSIGN_OR_RETURN(GpuBuffer a, GpuBuffer::allocate(g, slots * sizeof(int64_t), "bench"));
      ENGRAM_RETURN_IF_ERROR(rt(cudaMemcpy(a.get(), ids[g].data(), a.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy ids", g));
      d_ids.push_back(std::move(a));
      ENGRAM_ASSIGN_OR_RETURN(GpuBuffer b, GpuBuffer::allocate(g, slots * gpus * sizeof(int64_t), "bench"));
      d_all_ids.push_back(std::move(b));
      ENGRAM_ASSIGN_OR_RETURN(GpuBuffer c, GpuBuffer::allocate(g, point.write_bytes * gpus, "bench"));
      d_owned.push_back(std::move(c));
      ENGRAM_ASSIGN_OR_RETURN(GpuBuffer d, GpuBuffer::allocate(g, point.write_bytes, "bench"));
      d_result.push_back(std::move(d));
      ENGRAM_ASSIGN_OR_RETURN(GpuBuffer e, GpuBuffer::allocate(g, point.write_bytes, "bench"));
      d_peer_out.push_back(std::move(e));
      ENGRAM_ASSIGN_OR_RETURN(GpuBuffer f, GpuBuffer::allocate(g, point.write_bytes, "bench"));
      d_copy_out.push_back(std::move(f));
      if (o.sweep_variants) {
        ENGRAM_ASSIGN_OR_RETURN(GpuBuffer v, GpuBuffer::allocate(g, point.write_bytes, "bench"));
        d_variant_out.push_back(std::move(v));
      }
    }

    auto enqueue_collective = [&]() -> Status {
      {
        NcclGroup group;
        for (int g = 0; g < gpus; ++g) {
          ENGRAM_RETURN_IF_ERROR(comms[g]->all_gather_ids(d_ids[g].as<int64_t>(), d_all_ids[g].as<int64_t>(), slots,
                                                          timer.stream(static_cast<size_t>(g))));
        }
        ENGRAM_RETURN_IF_ERROR(group.end());
      }
      for (int g = 0; g < gpus; ++g) {
        ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(g), "cudaSetDevice", g));
        ENGRAM_RETURN_IF_ERROR(kernels::zero_fill(d_owned[g].as<uint16_t>(), d_owned[g].bytes() / 2, timer.stream(static_cast<size_t>(g))));
        kernels::GatherOwnedArgs owned;
        owned.ids = d_all_ids[g].as<int64_t>();
        owned.tokens = tokens * gpus;
        owned.heads = o.heads;
        owned.shard_begin = shards.shard_begin(g);
        owned.shard_end = shards.shard_end(g);
        owned.shard_base = table.shard(g, g);
        owned.layout = layout;
        owned.out = d_owned[g].as<uint16_t>();
        ENGRAM_RETURN_IF_ERROR(kernels::gather_owned(owned, timer.stream(static_cast<size_t>(g))).with_context(g, -1, "gather_owned"));
      }
      NcclGroup group;
      for (int g = 0; g < gpus; ++g) {
        ENGRAM_RETURN_IF_ERROR(comms[g]->reduce_scatter_sum_bf16(d_owned[g].as<uint16_t>(), d_result[g].as<uint16_t>(),
                                                                 slots * static_cast<uint64_t>(o.dim), timer.stream(static_cast<size_t>(g))));
      }
      return group.end();
    };
    auto peer_args = [&](int g, const std::vector<GpuBuffer>& out) {
      kernels::GatherPeerArgs peer;
      peer.ids = d_ids[g].as<int64_t>();
      peer.tokens = tokens;
      peer.heads = o.heads;
      peer.shard_starts = table.device_starts(g);
      peer.shard_bases = table.device_bases(g);
      peer.shard_count = gpus;
      peer.layout = layout;
      peer.out = out[g].as<uint16_t>();
      return peer;
    };
    point.peer_variant = kernels::peer_variant_name(kernels::peer_variant_for(static_cast<int64_t>(slots)));
    auto enqueue_peer = [&]() -> Status {
      for (int g = 0; g < gpus; ++g) {
        ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(g), "cudaSetDevice", g));
        ENGRAM_RETURN_IF_ERROR(kernels::gather_peer(peer_args(g, d_peer_out), timer.stream(static_cast<size_t>(g)))
                                   .with_context(g, -1, "gather_peer"));
      }
      return Status::ok();
    };
    // Copies of the same bytes: slots x 264 read (rounded up to 16 B) from
    // the own shard or the next GPU's, slots x 512 written.
    const uint64_t copy_read = round_up(point.read_bytes, 16);
    if (copy_read > table.allocation_bytes()) {
      return invalid_argument(fmt::format("bench: {} tokens per rank read {} but a shard holds only {}; raise "
                                          "--shard-gib", tokens, format_bytes(copy_read),
                                          format_bytes(table.allocation_bytes())));
    }
    auto enqueue_copy = [&](bool from_peer) {
      return [&, from_peer]() -> Status {
        for (int g = 0; g < gpus; ++g) {
          ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(g), "cudaSetDevice", g));
          const void* src = table.shard(g, from_peer ? (g + 1) % gpus : g);
          ENGRAM_RETURN_IF_ERROR(kernels::stream_copy(src, copy_read, d_copy_out[g].get(), point.write_bytes,
                                                      timer.stream(static_cast<size_t>(g))));
        }
        return Status::ok();
      };
    };

    auto measure = [&](const char* name, const std::function<Status()>& enqueue, bool* as_graph,
                       LatencyPercentiles& into) -> Status {
      auto graphs = timer.capture(enqueue);
      Status captured = graphs.status();
      Result<std::vector<double>> us = std::vector<double>{};
      if (captured.is_ok()) {
        us = timer.time([&] { return timer.launch(*graphs); });
        if (as_graph) *as_graph = true;
      } else {
        if (as_graph == nullptr) return std::move(captured).with_context(-1, -1, std::string(name) + " capture");
        // A failed capture leaves the streams usable; time eager launches.
        for (int g = 0; g < gpus; ++g) {
          cudaSetDevice(g);
          cudaGetLastError();
        }
        report.notes.push_back(fmt::format("{} path at {} tokens timed as eager launches: graph capture failed: {}",
                                           name, tokens, captured.to_string()));
        say("bench: " + report.notes.back());
        us = timer.time(enqueue);
      }
      if (!us.is_ok()) return std::move(us).take_status();
      ENGRAM_ASSIGN_OR_RETURN(into, latency_percentiles(*us));
      return Status::ok();
    };

    auto enqueue_plain = [&]() -> Status {
      for (int g = 0; g < gpus; ++g) {
        ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(g), "cudaSetDevice", g));
        kernels::PlainGatherArgs plain;
        plain.ids = d_ids[g].as<int64_t>();
        plain.slots = static_cast<int64_t>(slots);
        plain.shard_count = gpus;
        for (int shard = 0; shard < gpus; ++shard) {
          plain.starts[shard] = shards.shard_begin(shard);
          plain.bases[shard] = table.shard(g, shard);
        }
        plain.starts[gpus] = shards.shard_end(gpus - 1);
        plain.row_bytes = row_bytes;
        plain.out = d_copy_out[g].get();
        ENGRAM_RETURN_IF_ERROR(kernels::plain_gather(plain, timer.stream(static_cast<size_t>(g))).with_context(g, -1, "plain_gather"));
      }
      return Status::ok();
    };

    if (!comms.empty()) {
      ENGRAM_RETURN_IF_ERROR(measure("collective", enqueue_collective, &point.collective_as_graph, point.collective));
      point.collective_ran = true;
    }
    ENGRAM_RETURN_IF_ERROR(measure("peer", enqueue_peer, nullptr, point.peer));
    ENGRAM_RETURN_IF_ERROR(measure("local copy", enqueue_copy(false), nullptr, point.local_copy));
    ENGRAM_RETURN_IF_ERROR(measure("peer copy", enqueue_copy(true), nullptr, point.peer_copy));
    if (gpus <= kernels::PlainGatherArgs::kMaxShards) {
      ENGRAM_RETURN_IF_ERROR(measure("plain kernel", enqueue_plain, nullptr, point.plain));
      point.plain_ran = true;
    }

    CopyFloorInputs floor;
    floor.read_bytes = point.read_bytes;
    floor.write_bytes = point.write_bytes;
    floor.remote_fraction = point.remote_fraction;
    floor.local_fraction = point.local_fraction;
    floor.local_copy_us = point.local_copy.p50_us;
    floor.peer_copy_us = point.peer_copy.p50_us;
    ENGRAM_ASSIGN_OR_RETURN(point.floor_us, copy_floor_us(floor));

    // GPU 0's outputs: peer == collective bitwise, and sampled slots against
    // the CPU rule over the fill pattern.
    ENGRAM_ASSIGN_OR_RETURN(auto peer_out, download(d_peer_out[0], 0));
    if (point.collective_ran) {
      ENGRAM_ASSIGN_OR_RETURN(auto collective_out, download(d_result[0], 0));
      for (size_t i = 0; i < peer_out.size(); ++i) {
        if (!bf16_same(peer_out[i], collective_out[i])) {
          return internal_error(fmt::format("bench: at {} tokens GPU 0 slot {} value {}: peer path {:#06x}, "
                                            "collective path {:#06x}", tokens, i / o.dim, i % o.dim, peer_out[i],
                                            collective_out[i]));
        }
      }
    }
    uint64_t pick = o.seed + static_cast<uint64_t>(tokens);
    const uint64_t samples = std::min<uint64_t>(slots, 256);
    std::vector<std::byte> row(row_bytes);
    std::vector<uint16_t> expected(static_cast<size_t>(o.dim));
    for (uint64_t n = 0; n < samples; ++n) {
      const uint64_t slot = samples == slots ? n : splitmix64_next(pick) % slots;
      const int64_t id = ids[0][slot];
      if (id == kDeadId) {
        std::fill(expected.begin(), expected.end(), 0);
      } else {
        for (uint64_t w = 0; w < row_bytes / 8; ++w) {
          const uint64_t word = kernels::fill_word(o.seed, id, w, row_bytes, o.dim);
          std::memcpy(row.data() + 8 * w, &word, 8);
        }
        dequantize_row(RowFormat::kFp8E4M3Ue8m0, o.dim, row, expected);
      }
      for (int v = 0; v < o.dim; ++v) {
        const uint16_t got = peer_out[slot * static_cast<uint64_t>(o.dim) + static_cast<uint64_t>(v)];
        if (!bf16_same(expected[static_cast<size_t>(v)], got)) {
          return internal_error(fmt::format("bench: at {} tokens GPU 0 slot {} (row {}) value {}: CPU rule {:#06x}, "
                                            "peer path {:#06x}", tokens, slot, id, v, expected[static_cast<size_t>(v)],
                                            got));
        }
      }
    }
    point.slots_checked_against_cpu = samples;

    // Every compiled variant, timed the same way, its output == the peer
    // path's bitwise on GPU 0.
    if (o.sweep_variants) {
      for (const kernels::PeerVariant& variant : kernels::peer_variants()) {
        const std::string name = kernels::peer_variant_name(variant);
        ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(0), "cudaSetDevice", 0));
        ENGRAM_RETURN_IF_ERROR(rt(cudaMemset(d_variant_out[0].get(), 0xab, d_variant_out[0].bytes()),
                                  "cudaMemset variant output", 0));
        VariantTiming timing;
        timing.name = name;
        ENGRAM_RETURN_IF_ERROR(measure(name.c_str(), [&]() -> Status {
          for (int g = 0; g < gpus; ++g) {
            ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(g), "cudaSetDevice", g));
            ENGRAM_RETURN_IF_ERROR(kernels::gather_peer_variant(peer_args(g, d_variant_out), variant, timer.stream(static_cast<size_t>(g)))
                                       .with_context(g, -1, name));
          }
          return Status::ok();
        }, nullptr, timing.latency));
        ENGRAM_ASSIGN_OR_RETURN(auto variant_out, download(d_variant_out[0], 0));
        for (size_t i = 0; i < peer_out.size(); ++i) {
          if (variant_out[i] != peer_out[i]) {
            return internal_error(fmt::format("bench: at {} tokens variant {} differs from gather_peer at GPU 0 slot "
                                              "{} value {}: {:#06x} vs {:#06x}", tokens, name, i / o.dim, i % o.dim,
                                              variant_out[i], peer_out[i]));
          }
        }
        point.variants.push_back(std::move(timing));
      }
    }
    report.points.push_back(point);
  }
  comms.clear();
  return report;
}

}  // namespace engram::cuda
