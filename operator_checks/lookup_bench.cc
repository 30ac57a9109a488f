#include "operator_checks/lookup_bench.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "backends/cuda/cuda_driver.h"
#include "backends/cuda/gpu_buffer.h"
#include "backends/cuda/graph_timing.h"
#include "backends/cuda/nccl_collectives.h"
#include "core/base/bf16.h"
#include "core/model/row_format.h"
#include "core/base/check.h"
#include "core/base/splitmix64.h"
#include "core/model/table_spec.h"
#include "core/base/units.h"
#include "operator_checks/bench_kernels.h"
#include "kernels/gather_kernels.h"
#include "kernels/gather_peer_variants.h"

namespace engram::operator_checks {

// The real CUDA backend is what this benchmark times: its types throughout.
using namespace engram::cuda;
namespace {

Status rt(cudaError_t error, const std::string& call, int gpu) { return cuda_runtime_status(error, call, gpu, "bench"); }

Result<std::vector<uint16_t>> download(const GpuBuffer& b, int gpu) {
  std::vector<uint16_t> host(b.bytes() / 2);
  ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(gpu), "cudaSetDevice", gpu));
  ENGRAM_RETURN_IF_ERROR(rt(cudaMemcpy(host.data(), b.get(), b.bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H", gpu));
  return host;
}

using Say = std::function<void(const std::string&)>;

Status check_bench_options(const LookupBenchOptions& o) {
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
  if (!o.ids) return invalid_argument("bench: no ids to look up (LookupBenchOptions::ids is empty)");
  if (o.id_draws < 1 || o.id_draws > o.replays) {
    return invalid_argument(fmt::format("bench: id draws {} must be from 1 to the replays ({})", o.id_draws, o.replays));
  }
  const GpuPresence presence = gpu_presence();
  if (presence.count == 0) return failed_precondition("bench: no GPU: " + presence.reason);
  if (o.gpu < 0 || o.gpu >= presence.count || o.peer_gpu >= presence.count || o.peer_gpu == o.gpu) {
    return invalid_argument(fmt::format("bench: GPU {} (NVLink copy from {}) asked for; this process sees {}", o.gpu,
                                        o.peer_gpu, presence.count));
  }
  return Status::ok();
}

// The table: one device buffer, filled on the GPU (16 bytes of slack: the
// V4.1 fast path reads rows as aligned 16-byte chunks), and the one-shard
// starts and bases the peer kernels read.
struct ReferenceTable {
  int64_t rows = 0;
  uint64_t row_bytes = 0;
  uint64_t allocation = 0;
  GpuBuffer table;
  GpuBuffer starts;
  GpuBuffer bases;
};

Result<ReferenceTable> fill_reference_table(const LookupBenchOptions& o, const LookupBenchReport& report,
                                            const Say& say) {
  const int gpu = report.gpu;
  ReferenceTable ref;
  ref.rows = report.table_rows;
  ref.row_bytes = report.row_bytes;
  say(fmt::format("bench: one-process reference on GPU {}: table of {} rows x {} B = {}; filling on device", gpu,
                  ref.rows, ref.row_bytes, format_gib(static_cast<uint64_t>(ref.rows) * ref.row_bytes)));
  ref.allocation = round_up(static_cast<uint64_t>(ref.rows) * ref.row_bytes, 16) + 16;
  ENGRAM_ASSIGN_OR_RETURN(ref.table, GpuBuffer::allocate(gpu, ref.allocation, "bench table"));
  {
    ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(gpu), "cudaSetDevice", gpu));
    operator_checks::ShardFillArgs fill;
    fill.shard = ref.table.as<uint8_t>();
    fill.first_row = 0;
    fill.rows = ref.rows;
    fill.row_bytes = ref.row_bytes;
    fill.dim = o.dim;
    fill.seed = o.seed;
    ENGRAM_RETURN_IF_ERROR(operator_checks::fill_shard(fill, nullptr).with_context(gpu, -1, "fill"));
    ENGRAM_RETURN_IF_ERROR(rt(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the fill", gpu));
  }
  const int64_t starts_host[2] = {0, ref.rows};
  const void* bases_host[1] = {ref.table.get()};
  ENGRAM_ASSIGN_OR_RETURN(ref.starts, GpuBuffer::allocate(gpu, sizeof(starts_host), "bench"));
  ENGRAM_ASSIGN_OR_RETURN(ref.bases, GpuBuffer::allocate(gpu, sizeof(bases_host), "bench"));
  ENGRAM_RETURN_IF_ERROR(rt(cudaMemcpy(ref.starts.get(), starts_host, sizeof(starts_host), cudaMemcpyHostToDevice),
                            "cudaMemcpy shard starts", gpu));
  ENGRAM_RETURN_IF_ERROR(rt(cudaMemcpy(ref.bases.get(), bases_host, sizeof(bases_host), cudaMemcpyHostToDevice),
                            "cudaMemcpy shard bases", gpu));
  return ref;
}

// The NVLink copy's source lives on the peer GPU, read by this one's
// kernel: peer access is enabled for the copies (and disabled after by the
// caller, when it was enabled here, so the process is left as it was).
struct PeerCopySource {
  GpuBuffer buffer;  // empty: not measured
  bool enabled_here = false;
};

Result<PeerCopySource> prepare_peer_copy(const LookupBenchOptions& o, LookupBenchReport& report, const Say& say) {
  const int gpu = report.gpu;
  PeerCopySource out;
  if (o.peer_gpu < 0) return out;
  uint64_t copy_read_max = 0;
  for (int64_t t : o.tokens_per_rank)
    copy_read_max = std::max(copy_read_max, round_up(static_cast<uint64_t>(t) * o.heads * report.row_bytes, 16));
  int can = 0;
  ENGRAM_RETURN_IF_ERROR(rt(cudaDeviceCanAccessPeer(&can, gpu, o.peer_gpu), "cudaDeviceCanAccessPeer", gpu));
  if (can == 0) {
    report.notes.push_back(fmt::format("NVLink copy not measured: GPU {} cannot read GPU {}'s memory", gpu, o.peer_gpu));
    say("bench: " + report.notes.back());
    return out;
  }
  ENGRAM_ASSIGN_OR_RETURN(out.buffer, GpuBuffer::allocate(o.peer_gpu, copy_read_max, "bench peer copy source"));
  ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(gpu), "cudaSetDevice", gpu));
  const cudaError_t enabled = cudaDeviceEnablePeerAccess(o.peer_gpu, 0);
  if (enabled == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();
  } else {
    ENGRAM_RETURN_IF_ERROR(rt(enabled, fmt::format("cudaDeviceEnablePeerAccess({})", o.peer_gpu), gpu));
    out.enabled_here = true;
  }
  return out;
}

// A one-member NCCL communicator for the collective path; null (noted) when
// NCCL cannot make one.
std::unique_ptr<NcclCommunicator> open_collective(LookupBenchReport& report, const Say& say) {
  const int devices[1] = {report.gpu};
  auto made = NcclCommunicator::create_local_group(devices);
  if (made.is_ok()) return std::move(made->front());
  report.notes.push_back("collective path not measured: " + made.status().to_string());
  say("bench: " + report.notes.back());
  return nullptr;
}

// The method's fixed cost: an empty graph and a one-empty-kernel graph,
// launched and timed exactly as the lookups are.
Status time_fixed_costs(GraphTimer& timer, LookupBenchReport& report, const Say& say) {
  const int gpu = report.gpu;
  const cudaStream_t stream = timer.stream(0);
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
    cudaSetDevice(gpu);
    cudaGetLastError();
    report.notes.push_back("empty graph not timed: " + empty.status().to_string());
    say("bench: " + report.notes.back());
  }
  ENGRAM_ASSIGN_OR_RETURN(report.empty_kernel_graph, time_graph([&]() -> Status {
    ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(gpu), "cudaSetDevice", gpu));
    return operator_checks::empty_kernel(stream);
  }));
  return Status::ok();
}

// What every point's measurement reads.
struct BenchContext {
  const LookupBenchOptions& o;
  const ReferenceTable& ref;
  const PeerCopySource& peer_source;
  GraphTimer& timer;
  cudaStream_t stream;
  NcclCommunicator* comm;  // null: no collective path
  kernels::RowLayout layout;
  LookupBenchReport& report;
  const Say& say;
  int gpu() const { return report.gpu; }
};

// A path timed over all the replays at once: a copy (it reads no ids) or a
// kernel variant (over the last draw's ids).
Status measure_path(const BenchContext& c, const char* name, const std::function<Status()>& enqueue,
                    LatencyPercentiles& into) {
  auto graphs = c.timer.capture(enqueue);
  if (!graphs.is_ok()) return std::move(graphs).take_status().with_context(c.gpu(), -1, std::string(name) + " capture");
  ENGRAM_ASSIGN_OR_RETURN(auto us, c.timer.time([&] { return c.timer.launch(*graphs); }));
  ENGRAM_ASSIGN_OR_RETURN(into, latency_percentiles(std::move(us)));
  return Status::ok();
}

// A lookup path of one size over the draws of ids: captured once (its graph
// reads the ids buffer, refilled before each draw) or, where the capture
// fails and the path may run eagerly (`as_graph` given), launched eagerly,
// noted; each draw's replays pooled.
struct DrawnPath {
  const char* name;
  std::function<Status()> enqueue;
  bool* as_graph;  // null: the path must capture
  LatencyPercentiles* into;
  std::optional<GpuGraphs> graphs{};
  std::vector<double> samples_us{};
};

Status capture_path(const BenchContext& c, int64_t tokens, DrawnPath& p) {
  auto graphs = c.timer.capture(p.enqueue);
  if (graphs.is_ok()) {
    p.graphs = std::move(graphs).value();
    if (p.as_graph) *p.as_graph = true;
    return Status::ok();
  }
  if (p.as_graph == nullptr) return std::move(graphs).take_status().with_context(c.gpu(), -1, std::string(p.name) + " capture");
  // A failed capture leaves the stream usable; time eager launches.
  cudaSetDevice(c.gpu());
  cudaGetLastError();
  c.report.notes.push_back(fmt::format("{} path at {} tokens timed as eager launches: graph capture failed: {}", p.name,
                                       tokens, graphs.status().to_string()));
  c.say("bench: " + c.report.notes.back());
  return Status::ok();
}

Status time_path_draw(const BenchContext& c, DrawnPath& p, int replays) {
  Result<std::vector<double>> us = p.graphs ? c.timer.time([&] { return c.timer.launch(*p.graphs); }, replays)
                                            : c.timer.time(p.enqueue, replays);
  if (!us.is_ok()) return std::move(us).take_status();
  p.samples_us.insert(p.samples_us.end(), us->begin(), us->end());
  return Status::ok();
}

// The outputs: peer == collective bitwise, and sampled slots against the
// CPU rule over the fill pattern; returns how many slots were sampled.
Result<uint64_t> check_point_outputs(const BenchContext& c, int64_t tokens, const std::vector<int64_t>& ids,
                                     const std::vector<uint16_t>& peer_out, const GpuBuffer* collective_result) {
  const LookupBenchOptions& o = c.o;
  const int gpu = c.gpu();
  const uint64_t row_bytes = c.ref.row_bytes;
  const uint64_t slots = ids.size();
  if (collective_result != nullptr) {
    ENGRAM_ASSIGN_OR_RETURN(auto collective_out, download(*collective_result, gpu));
    for (size_t i = 0; i < peer_out.size(); ++i) {
      if (!bf16_same(peer_out[i], collective_out[i])) {
        return internal_error(fmt::format("bench: at {} tokens GPU {} slot {} value {}: peer path {:#06x}, "
                                          "collective path {:#06x}", tokens, gpu, i / o.dim, i % o.dim, peer_out[i],
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
    const int64_t id = ids[slot];
    if (id == kDeadId || id < 0 || id >= c.ref.rows) {  // DEAD, negative and out-of-table ids read zero rows
      std::fill(expected.begin(), expected.end(), 0);
    } else {
      for (uint64_t w = 0; w < row_bytes / 8; ++w) {
        const uint64_t word = operator_checks::fill_word(o.seed, id, w, row_bytes, o.dim);
        std::memcpy(row.data() + 8 * w, &word, 8);
      }
      dequantize_row(RowFormat::kFp8E4M3Ue8m0, o.dim, ScaleByteRule::kVllm, row, expected);  // the bench's tables use vLLM's rule
    }
    for (int v = 0; v < o.dim; ++v) {
      const uint16_t got = peer_out[slot * static_cast<uint64_t>(o.dim) + static_cast<uint64_t>(v)];
      if (!bf16_same(expected[static_cast<size_t>(v)], got)) {
        return internal_error(fmt::format("bench: at {} tokens GPU {} slot {} (row {}) value {}: CPU rule {:#06x}, "
                                          "peer path {:#06x}", tokens, gpu, slot, id, v,
                                          expected[static_cast<size_t>(v)], got));
      }
    }
  }
  return samples;
}

// Every compiled variant, timed the same way, its output == the peer
// path's bitwise.
Status sweep_peer_variants(const BenchContext& c, int64_t tokens,
                           const std::function<kernels::GatherPeerArgs(GpuBuffer&)>& peer_args,
                           GpuBuffer& d_variant_out, const std::vector<uint16_t>& peer_out, LookupBenchPoint& point) {
  const LookupBenchOptions& o = c.o;
  const int gpu = c.gpu();
  for (const kernels::PeerVariant& variant : kernels::peer_variants()) {
    const std::string name = kernels::peer_variant_name(variant);
    ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(gpu), "cudaSetDevice", gpu));
    ENGRAM_RETURN_IF_ERROR(rt(cudaMemset(d_variant_out.get(), 0xab, d_variant_out.bytes()),
                              "cudaMemset variant output", gpu));
    VariantTiming timing;
    timing.name = name;
    ENGRAM_RETURN_IF_ERROR(measure_path(c, name.c_str(), [&]() -> Status {
      ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(gpu), "cudaSetDevice", gpu));
      return kernels::gather_peer_variant(peer_args(d_variant_out), variant, c.stream).with_context(gpu, -1, name);
    }, timing.latency));
    ENGRAM_ASSIGN_OR_RETURN(auto variant_out, download(d_variant_out, gpu));
    for (size_t i = 0; i < peer_out.size(); ++i) {
      if (variant_out[i] != peer_out[i]) {
        return internal_error(fmt::format("bench: at {} tokens variant {} differs from gather_peer at GPU {} slot "
                                          "{} value {}: {:#06x} vs {:#06x}", tokens, name, gpu, i / o.dim,
                                          i % o.dim, variant_out[i], peer_out[i]));
      }
    }
    point.variants.push_back(std::move(timing));
  }
  return Status::ok();
}

// One token count: its ids and buffers, every path timed, the outputs checked.
Result<LookupBenchPoint> measure_point(const BenchContext& c, int64_t tokens) {
  const LookupBenchOptions& o = c.o;
  const int gpu = c.gpu();
  const int64_t table_rows = c.ref.rows;
  const uint64_t row_bytes = c.ref.row_bytes;
  const cudaStream_t stream = c.stream;
  LookupBenchPoint point;
  point.tokens_per_rank = tokens;
  const uint64_t slots = static_cast<uint64_t>(tokens) * static_cast<uint64_t>(o.heads);
  point.read_bytes = slots * row_bytes;
  point.write_bytes = slots * static_cast<uint64_t>(o.dim) * 2;
  c.say(fmt::format("bench: one-process reference, {} tokens per rank ({} rows)", tokens, slots));

  ENGRAM_ASSIGN_OR_RETURN(GpuBuffer d_ids, GpuBuffer::allocate(gpu, slots * sizeof(int64_t), "bench"));
  ENGRAM_ASSIGN_OR_RETURN(GpuBuffer d_all_ids, GpuBuffer::allocate(gpu, slots * sizeof(int64_t), "bench"));
  ENGRAM_ASSIGN_OR_RETURN(GpuBuffer d_owned, GpuBuffer::allocate(gpu, point.write_bytes, "bench"));
  ENGRAM_ASSIGN_OR_RETURN(GpuBuffer d_result, GpuBuffer::allocate(gpu, point.write_bytes, "bench"));
  ENGRAM_ASSIGN_OR_RETURN(GpuBuffer d_peer_out, GpuBuffer::allocate(gpu, point.write_bytes, "bench"));
  ENGRAM_ASSIGN_OR_RETURN(GpuBuffer d_copy_out, GpuBuffer::allocate(gpu, point.write_bytes, "bench"));
  GpuBuffer d_variant_out;
  if (o.sweep_variants) {
    ENGRAM_ASSIGN_OR_RETURN(d_variant_out, GpuBuffer::allocate(gpu, point.write_bytes, "bench"));
  }

  auto enqueue_collective = [&]() -> Status {
    ENGRAM_RETURN_IF_ERROR(c.comm->all_gather_ids(d_ids.as<int64_t>(), d_all_ids.as<int64_t>(), slots, stream));
    ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(gpu), "cudaSetDevice", gpu));
    ENGRAM_RETURN_IF_ERROR(kernels::zero_fill(d_owned.as<uint16_t>(), d_owned.bytes() / 2, stream));
    kernels::GatherOwnedArgs owned;
    owned.ids = d_all_ids.as<int64_t>();
    owned.tokens = tokens;
    owned.heads = o.heads;
    owned.shard_begin = 0;
    owned.shard_end = table_rows;
    owned.shard_base = c.ref.table.get();
    owned.layout = c.layout;
    owned.out = d_owned.as<uint16_t>();
    ENGRAM_RETURN_IF_ERROR(kernels::gather_owned(owned, stream).with_context(gpu, -1, "gather_owned"));
    return c.comm->reduce_scatter_sum_bf16(d_owned.as<uint16_t>(), d_result.as<uint16_t>(),
                                           slots * static_cast<uint64_t>(o.dim), stream);
  };
  auto peer_args = [&](GpuBuffer& out) {
    kernels::GatherPeerArgs peer;
    peer.ids = d_ids.as<int64_t>();
    peer.tokens = tokens;
    peer.heads = o.heads;
    peer.shard_starts = c.ref.starts.as<int64_t>();
    peer.shard_bases = c.ref.bases.as<const void* const>();
    peer.shard_count = 1;
    peer.layout = c.layout;
    peer.out = out.as<uint16_t>();
    return peer;
  };
  point.peer_variant = kernels::peer_variant_name(kernels::peer_variant_for(static_cast<int64_t>(slots)));
  auto enqueue_peer = [&]() -> Status {
    ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(gpu), "cudaSetDevice", gpu));
    return kernels::gather_peer(peer_args(d_peer_out), stream).with_context(gpu, -1, "gather_peer");
  };
  // Copies of the same bytes: slots x 264 read (rounded up to 16 B) from
  // this GPU's table or the peer GPU's buffer, slots x 512 written.
  const uint64_t copy_read = round_up(point.read_bytes, 16);
  if (copy_read > c.ref.allocation) {
    return invalid_argument(fmt::format("bench: {} tokens per rank read {} but the reference table holds only {}; "
                                        "raise --reference-gib", tokens, format_bytes(copy_read),
                                        format_bytes(c.ref.allocation)));
  }
  auto enqueue_copy = [&](const void* src) {
    return [&, src]() -> Status {
      ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(gpu), "cudaSetDevice", gpu));
      return operator_checks::stream_copy(src, copy_read, d_copy_out.get(), point.write_bytes, stream);
    };
  };
  auto enqueue_plain = [&]() -> Status {
    ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(gpu), "cudaSetDevice", gpu));
    operator_checks::PlainGatherArgs plain;
    plain.ids = d_ids.as<int64_t>();
    plain.slots = static_cast<int64_t>(slots);
    plain.shard_count = 1;
    plain.starts[0] = 0;
    plain.starts[1] = table_rows;
    plain.bases[0] = c.ref.table.get();
    plain.row_bytes = row_bytes;
    plain.out = d_copy_out.get();
    return operator_checks::plain_gather(plain, stream).with_context(gpu, -1, "plain_gather");
  };

  // The lookup paths over every draw of ids, each draw's outputs checked.
  std::vector<DrawnPath> paths;
  if (c.comm != nullptr) paths.push_back({"collective", enqueue_collective, &point.collective_as_graph, &point.collective});
  paths.push_back({"peer", enqueue_peer, nullptr, &point.peer});
  paths.push_back({"plain kernel", enqueue_plain, nullptr, &point.plain});
  for (DrawnPath& p : paths) ENGRAM_RETURN_IF_ERROR(capture_path(c, tokens, p));
  point.collective_ran = c.comm != nullptr;
  point.ids_fingerprint = static_cast<uint64_t>(tokens);
  std::vector<int64_t> ids;
  std::vector<uint16_t> peer_out;
  for (int draw = 0; draw < o.id_draws; ++draw) {
    ids = o.ids(tokens, draw);
    if (ids.size() != slots) {
      return invalid_argument(fmt::format("bench: draw {} at {} tokens has {} ids; {} tokens x {} heads = {} expected",
                                          draw, tokens, ids.size(), tokens, o.heads, slots));
    }
    point.ids_fingerprint = splitmix64_fold(point.ids_fingerprint, ids.data(), ids.size());
    ENGRAM_RETURN_IF_ERROR(rt(cudaMemcpy(d_ids.get(), ids.data(), d_ids.bytes(), cudaMemcpyHostToDevice),
                              "cudaMemcpy ids", gpu));
    const int replays = replays_in_draw(o.replays, o.id_draws, draw);
    for (DrawnPath& p : paths) ENGRAM_RETURN_IF_ERROR(time_path_draw(c, p, replays));
    ENGRAM_ASSIGN_OR_RETURN(peer_out, download(d_peer_out, gpu));
    ENGRAM_ASSIGN_OR_RETURN(const uint64_t checked,
                            check_point_outputs(c, tokens, ids, peer_out, point.collective_ran ? &d_result : nullptr));
    point.slots_checked_against_cpu += checked;
  }
  for (DrawnPath& p : paths) {
    ENGRAM_CHECK(p.samples_us.size() == static_cast<size_t>(o.replays));
    ENGRAM_ASSIGN_OR_RETURN(*p.into, latency_percentiles(std::move(p.samples_us)));
  }

  ENGRAM_RETURN_IF_ERROR(measure_path(c, "local copy", enqueue_copy(c.ref.table.get()), point.local_copy));
  if (c.peer_source.buffer.get() != nullptr) {
    ENGRAM_RETURN_IF_ERROR(measure_path(c, "peer copy", enqueue_copy(c.peer_source.buffer.get()), point.peer_copy));
    point.peer_copy_ran = true;
  }

  if (o.sweep_variants) {  // over the last draw's ids, still in d_ids
    ENGRAM_RETURN_IF_ERROR(sweep_peer_variants(c, tokens, peer_args, d_variant_out, peer_out, point));
  }
  return point;
}

}  // namespace

Result<LookupBenchReport> run_lookup_bench(const LookupBenchOptions& o,
                                           const std::function<void(std::string_view)>& log) {
  const Say say = [&](const std::string& line) { if (log) log(line); };
  ENGRAM_RETURN_IF_ERROR(check_bench_options(o));
  // NVLink multicast off unless the caller decided otherwise: on shared hosts
  // it can take the GPUs out of service.
  setenv("NCCL_NVLS_ENABLE", "0", 0);

  const int gpu = o.gpu;
  const uint64_t row_bytes = row_bytes_for(RowFormat::kFp8E4M3Ue8m0, o.dim);
  const int64_t table_rows = static_cast<int64_t>(o.table_bytes / row_bytes);
  if (table_rows < 1) return invalid_argument(fmt::format("bench: a table of {} bytes holds no row", o.table_bytes));
  LookupBenchReport report;
  report.gpu = gpu;
  report.table_rows = table_rows;
  report.row_bytes = row_bytes;
  {
    cudaDeviceProp prop{};
    ENGRAM_RETURN_IF_ERROR(rt(cudaGetDeviceProperties(&prop, gpu), "cudaGetDeviceProperties", gpu));
    report.device_name = prop.name;
  }
  ENGRAM_ASSIGN_OR_RETURN(const ReferenceTable ref, fill_reference_table(o, report, say));
  ENGRAM_ASSIGN_OR_RETURN(const PeerCopySource peer_source, prepare_peer_copy(o, report, say));
  struct PeerAccessUndo {
    bool on;
    int gpu, peer;
    ~PeerAccessUndo() {
      if (!on) return;
      cudaSetDevice(gpu);
      cudaDeviceDisablePeerAccess(peer);
    }
  } undo_peer_access{peer_source.enabled_here, gpu, o.peer_gpu};

  ENGRAM_ASSIGN_OR_RETURN(auto timer_owner, GraphTimer::create({gpu}, o.replays, o.warmup_replays, o.cold_l2));
  GraphTimer& timer = *timer_owner;
  std::unique_ptr<NcclCommunicator> comm = open_collective(report, say);
  kernels::RowLayout layout;
  layout.format = RowFormat::kFp8E4M3Ue8m0;
  layout.dim = o.dim;
  layout.row_bytes = row_bytes;
  ENGRAM_RETURN_IF_ERROR(time_fixed_costs(timer, report, say));

  const BenchContext context{o, ref, peer_source, timer, timer.stream(0), comm.get(), layout, report, say};
  for (int64_t tokens : o.tokens_per_rank) {
    ENGRAM_ASSIGN_OR_RETURN(LookupBenchPoint point, measure_point(context, tokens));
    report.points.push_back(std::move(point));
  }
  comm.reset();
  return report;
}

}  // namespace engram::operator_checks
