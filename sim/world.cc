#include "sim/world.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/base/coverage_probe.h"
#include "core/base/rerun_command.h"
#include "core/model/gpu_models.h"
#include "sim/fiber_stack_room.h"
#include "sim/heap_huge_pages.h"
#include "sim/scheduler.h"
#include "sim/sim_collectives.h"
#include "sim/sim_device_compute.h"
#include "sim/sim_device_memory.h"
#include "sim/sim_fd_channel.h"
#include "sim/sim_host_probe.h"
#include "sim/sim_process_shared_memory.h"
#include "sim/sim_host_shared_memory.h"

namespace engram::sim {

namespace {

// Collectives of one rank, with the "collective" death checkpoint at every
// entry; a dead rank's calls fail at once instead of joining a rendezvous.
class CheckpointedCollectives final : public Collectives, public SparseReduceScatter {
 public:
  CheckpointedCollectives(SimContext& context, std::unique_ptr<Collectives> inner)
      : context_(context), inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int world_rank() const override { return inner_->world_rank(); }

  Status all_gather(std::span<const std::byte> mine, std::span<std::byte> all) override {
    ENGRAM_RETURN_IF_ERROR(enter("all_gather"));
    return inner_->all_gather(mine, all);
  }
  Result<std::shared_ptr<const GatheredBytes>> all_gather_shared(std::span<const std::byte> mine) override {
    ENGRAM_RETURN_IF_ERROR(enter("all_gather"));
    return inner_->all_gather_shared(mine);
  }
  Status reduce_scatter_sum_bf16(std::span<const uint16_t> input, std::span<uint16_t> output) override {
    ENGRAM_RETURN_IF_ERROR(enter("reduce_scatter"));
    return inner_->reduce_scatter_sum_bf16(input, output);
  }
  Status reduce_scatter_sum_bf16_runs(uint64_t count, std::span<const Bf16Run> runs,
                                      std::span<uint16_t> output) override {
    auto* sparse = dynamic_cast<SparseReduceScatter*>(inner_.get());
    ENGRAM_CHECK(sparse != nullptr);  // the emulator's groups all are
    ENGRAM_RETURN_IF_ERROR(enter("reduce_scatter"));
    return sparse->reduce_scatter_sum_bf16_runs(count, runs, output);
  }
  Status reduce_scatter_max_bytes_runs(uint64_t count, std::span<const Bf16Run> runs,
                                       std::span<uint16_t> output) override {
    auto* sparse = dynamic_cast<SparseReduceScatter*>(inner_.get());
    ENGRAM_CHECK(sparse != nullptr);
    ENGRAM_RETURN_IF_ERROR(enter("reduce_scatter"));
    return sparse->reduce_scatter_max_bytes_runs(count, runs, output);
  }
  Status all_to_all(std::span<const std::byte> send, std::span<std::byte> receive) override {
    ENGRAM_RETURN_IF_ERROR(enter("all_to_all"));
    return inner_->all_to_all(send, receive);
  }
  Status barrier() override {
    ENGRAM_RETURN_IF_ERROR(enter("barrier"));
    return inner_->barrier();
  }
  Result<std::unique_ptr<Collectives>> split(int color, int key) override {
    ENGRAM_RETURN_IF_ERROR(enter("split"));
    ENGRAM_ASSIGN_OR_RETURN(auto group, inner_->split(color, key));
    return std::unique_ptr<Collectives>(std::make_unique<CheckpointedCollectives>(context_, std::move(group)));
  }

 private:
  Status enter(const char* step) {
    const int me = inner_->world_rank();
    if (context_.gone_at(kCollectiveCheckpoint, me)) return context_.dead_status(me, step);
    return Status::ok();
  }

  SimContext& context_;
  std::unique_ptr<Collectives> inner_;
};

struct RankObjects {
  std::unique_ptr<Collectives> world;
  std::unique_ptr<SimDeviceMemory> device;
  std::unique_ptr<SimDeviceCompute> compute;
  std::unique_ptr<SimFdChannel> fds;
  std::unique_ptr<SimHostSharedMemory> shm;
  std::unique_ptr<SimHostProbe> probe;
  std::unique_ptr<SimProcessSharedMemory> memfd;
  std::unique_ptr<SimStepClock> step_clock;
  RankBackend backend;
};

}  // namespace

bool WorldRun::all_ok() const {
  for (const auto& s : statuses)
    if (!s.is_ok()) return false;
  return true;
}

int WorldRun::failed_rank_count() const {
  int n = 0;
  for (const auto& s : statuses) n += s.is_ok() ? 0 : 1;
  return n;
}

std::string WorldRun::summary() const {
  std::string out = fmt::format("{} of {} ranks failed", failed_rank_count(), statuses.size());
  for (const auto& s : statuses)
    if (!s.is_ok()) {
      out += "; first: " + s.to_string();
      break;
    }
  if (!leaks.empty()) out += "; " + Ledger::format(leaks, 5);
  if (!live()) out += "; " + liveness_text();
  out += fmt::format("; trace {:016x}; reproduce: {}", trace_hash, reproduction);
  return out;
}

bool WorldRun::live() const { return deadlocked_waits == 0 && end_time_us <= liveness_bound_us; }

std::string WorldRun::liveness_text() const {
  if (deadlocked_waits != 0)
    return fmt::format("liveness: {} waits had no deadline and nothing could wake them (a deadlock)",
                       deadlocked_waits);
  return fmt::format("liveness: the run ended at {:.3f} s of simulated time, past its bound of {:.3f} s",
                     static_cast<double>(end_time_us) / 1e6, static_cast<double>(liveness_bound_us) / 1e6);
}

SimTimeUs liveness_bound_us(const WorldSpec& spec, SimTimeUs stalled_us) {
  // A rank waits out at most a few deadlines before its step fails (a
  // timed-out collective aborts its group, so later calls on it fail at
  // once), plus whatever the slow faults stalled, all of it in the worst
  // case of one rank waiting on the next in a chain.
  const SimTimeUs longest =
      std::max({spec.timeouts.collective_us, spec.timeouts.split_us, spec.timeouts.fd_receive_us});
  return kLivenessTimeouts * longest + stalled_us;
}

Result<WorldSpec> complete_world_spec(WorldSpec spec) {
  if (spec.hosts.empty()) return invalid_argument("world: no hosts: add at least one host");
  for (size_t h = 0; h < spec.hosts.size(); ++h) {
    HostSpec& host = spec.hosts[h];
    if (host.name.empty()) return invalid_argument(fmt::format("world: hosts[{}].name is empty: name every host", h));
    if (host.gpu_count < 1)
      return invalid_argument(fmt::format("world: hosts[{}].gpu_count = {}: a host needs at least one GPU", h,
                                          host.gpu_count));
    if (host.boot_id.empty()) host.boot_id = "boot-" + host.name;
    if (host.gpu_memory_bytes == 0) {
      ENGRAM_ASSIGN_OR_RETURN(host.gpu_memory_bytes, default_gpu_memory_bytes(host.gpu_model));
    }
  }
  if (spec.ranks.empty()) spec.ranks = ranks_filling_gpus(spec.hosts);
  for (size_t r = 0; r < spec.ranks.size(); ++r) {
    const RankPlace& p = spec.ranks[r];
    if (p.host < 0 || p.host >= static_cast<int>(spec.hosts.size()))
      return invalid_argument(fmt::format("world: rank {} is placed on host index {}, outside [0, {})", r, p.host,
                                          spec.hosts.size()));
    const HostSpec& host = spec.hosts[static_cast<size_t>(p.host)];
    if (p.gpu < 0 || p.gpu >= host.gpu_count)
      return invalid_argument(fmt::format("world: rank {} is placed on gpu {} of host {}, which has {} GPUs", r,
                                          p.gpu, host.name, host.gpu_count));
  }
  for (const auto& f : spec.faults.planned) {
    if (f.rank < 0 || f.rank >= static_cast<int>(spec.ranks.size()))
      return invalid_argument(fmt::format("world: fault plan names rank {}, outside [0, {})", f.rank,
                                          spec.ranks.size()));
    if (f.occurrence < 1)
      return invalid_argument(fmt::format("world: fault plan occurrence {} for {} rank {}: occurrences count from 1",
                                          f.occurrence, fault_site_name(f.site), f.rank));
    if (!f.at.empty() && !is_process_fault(f.site))
      return invalid_argument(fmt::format("world: fault plan 'at {}' applies to process faults only (rank_death, "
                                          "hang, slow), not {}",
                                          f.at, fault_site_name(f.site)));
    if (!f.at.empty() && !is_checkpoint(f.at))
      return invalid_argument(fmt::format("world: fault plan 'at {}' is not a checkpoint: use one of {}", f.at,
                                          checkpoint_names()));
    if (f.delay_us != 0 && f.site != FaultSite::kSlow)
      return invalid_argument(fmt::format("world: fault plan delay {} us applies to slow only, not {}", f.delay_us,
                                          fault_site_name(f.site)));
    if (f.slower.any() && f.site != FaultSite::kSlow)
      return invalid_argument(fmt::format("world: fault plan link/GPU factors apply to slow only, not {}",
                                          fault_site_name(f.site)));
    if (!(f.slower.link >= 1.0 && f.slower.gpu >= 1.0 && std::isfinite(f.slower.link) && std::isfinite(f.slower.gpu)))
      return invalid_argument(fmt::format("world: fault plan slow factors links x{} gpu x{} for rank {}: a factor is "
                                          "a finite number of at least 1 (2 = twice as slow)",
                                          f.slower.link, f.slower.gpu, f.rank));
  }
  for (double rate : spec.faults.rate)
    if (!(rate >= 0.0 && rate <= 1.0))
      return invalid_argument(fmt::format("world: fault rate {} is not a probability in [0, 1]", rate));
  if (spec.timeouts.collective_us == 0 || spec.timeouts.split_us == 0 || spec.timeouts.fd_receive_us == 0)
    return invalid_argument("world: a timeout of 0: every blocking step needs a deadline above zero");
  if (spec.reproduction.empty())
    spec.reproduction = rerun_command_or_test({"fuzz", "--seed", std::to_string(spec.seed), "--seeds", "1"});
  return spec;
}

Result<WorldRun> run_world(const WorldSpec& input, const RankBody& body) {
  ENGRAM_ASSIGN_OR_RETURN(WorldSpec spec, complete_world_spec(input));
  const int n = static_cast<int>(spec.ranks.size());
  // Refused with the numbers now, not aborted on a guard page's mprotect later.
  ENGRAM_RETURN_IF_ERROR(check_room_for_fiber_stacks(n, Scheduler::stack_bytes(), this_process_map_room()));
  // Large runs touch ~80 KiB of heap per rank (measured by the scale benchmark).
  if (n >= 256) reserve_heap_in_huge_pages(static_cast<uint64_t>(n) * (96u << 10));

  Scheduler scheduler(spec.seed);
  scheduler.keep_trace_text(spec.keep_trace_text);
  scheduler.keep_timeline(spec.keep_timeline);
  CollectiveHub hub(scheduler, n, spec.timeouts);
  SimContext context(scheduler, spec.hosts, spec.ranks, spec.faults, spec.seed);
  DeviceWorld devices(context);
  FdWorld fd_world(devices, spec.timeouts.fd_receive_us);
  ShmWorld shm_world(context, spec.shm_modelled_bytes);
  MemfdWorld memfd_world(context);
  std::vector<RankObjects> ranks(static_cast<size_t>(n));
  context.set_death_handler([&](int rank) {
    // As the OS and driver do for a dead process; its peers learn through
    // the hub (collectives) and the closed socket (fd channel).
    if (auto& compute = ranks[static_cast<size_t>(rank)].compute) compute->release_process();
    devices.release_process(rank);
    fd_world.close_channel(rank);
    shm_world.release_process(rank);
    hub.mark_dead(rank);
  });

  for (int r = 0; r < n; ++r) {
    RankObjects& o = ranks[static_cast<size_t>(r)];
    o.world = std::make_unique<CheckpointedCollectives>(context, hub.world(r));
    o.device = std::make_unique<SimDeviceMemory>(devices, r);
    o.compute = std::make_unique<SimDeviceCompute>(context, *o.device, r);
    o.fds = std::make_unique<SimFdChannel>(fd_world, r);
    o.shm = std::make_unique<SimHostSharedMemory>(shm_world, r);
    o.probe = std::make_unique<SimHostProbe>(context, r);
    o.backend = RankBackend{r, n, o.world.get(), o.device.get(), o.fds.get(), o.shm.get(), o.probe.get()};
    o.backend.compute = o.compute.get();
    o.memfd = std::make_unique<SimProcessSharedMemory>(memfd_world, r);
    o.backend.memfd = o.memfd.get();
  }

  WorldRun run;
  if (spec.step_pricer) {
    run.step_times.resize(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      RankObjects& o = ranks[static_cast<size_t>(r)];
      o.step_clock =
          std::make_unique<SimStepClock>(context, spec.step_pricer, r, run.step_times[static_cast<size_t>(r)]);
      o.backend.step_clock = o.step_clock.get();
    }
  }
  run.statuses.resize(static_cast<size_t>(n));
  run.died.assign(static_cast<size_t>(n), false);
  // Every rank runs on this thread, so one sink serves them all.
  CoverageSink* previous_sink = set_thread_coverage_sink(&context.coverage());
  scheduler.run(n, [&](int r) {
    Status status = body(ranks[static_cast<size_t>(r)].backend);
    if (context.is_dead(r)) {
      status = context.dead_status(r, context.death_site_name(r));
      run.died[static_cast<size_t>(r)] = true;
    }
    run.statuses[static_cast<size_t>(r)] = std::move(status);
    // The process exits: its socket closes, and fds still in flight to it
    // go with it (the kernel closes them), so they are not its leaks.
    if (!fd_world.channel_closed(r)) fd_world.close_channel(r);
  });
  set_thread_coverage_sink(previous_sink);

  run.trace_hash = scheduler.trace_hash();
  run.scheduler_switches = scheduler.switch_count();
  run.end_time_us = scheduler.now_us();
  run.deadlocked_waits = scheduler.deadlock_count();
  run.shm_remote_numa_maps = shm_world.remote_numa_maps();
  // The steps' time counts as the stalls do, as if every rank's came one after another.
  SimTimeUs stepped_us = 0;
  for (const RankStepTimes& t : run.step_times) stepped_us += t.advanced_us;
  run.liveness_bound_us = liveness_bound_us(spec, context.stalled_us() + stepped_us);
  run.faults = context.faults().report();
  run.coverage = context.coverage().counts();
  run.leaks = context.ledger().leaks();
  run.reproduction = spec.reproduction;
  run.trace_text = scheduler.trace_text();
  run.timeline = scheduler.timeline();
  return run;
}

std::vector<HostSpec> plain_hosts(const std::string& prefix, int count, int gpus, const std::string& model) {
  std::vector<HostSpec> hosts;
  for (int i = 0; i < count; ++i) {
    HostSpec h;
    h.name = fmt::format("{}{}", prefix, i);
    h.gpu_count = gpus;
    h.gpu_model = model;
    hosts.push_back(std::move(h));
  }
  return hosts;
}

std::vector<HostSpec> gb300_nvl72_racks(int rack_count) {
  std::vector<HostSpec> hosts;
  for (int rack = 0; rack < rack_count; ++rack)
    for (int tray = 0; tray < 18; ++tray) {
      HostSpec h;
      h.name = fmt::format("rack{}-tray{}", rack, tray);
      h.gpu_count = 4;
      h.gpu_model = "GB300";
      h.nvlink_domain = fmt::format("nvl72-rack{}", rack);
      h.imex_channel = true;
      h.fabric_attribute = true;
      h.tmpfs_bytes_total = 512ull << 30;
      hosts.push_back(std::move(h));
    }
  return hosts;
}

std::vector<RankPlace> ranks_filling_gpus(const std::vector<HostSpec>& hosts) {
  std::vector<RankPlace> ranks;
  for (size_t h = 0; h < hosts.size(); ++h)
    for (int slot = 0; slot < rank_slots(hosts[h]); ++slot)
      ranks.push_back({static_cast<int>(h), slot / std::max(1, hosts[h].ranks_per_gpu)});
  return ranks;
}

}  // namespace engram::sim
