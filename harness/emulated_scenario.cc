#include "harness/emulated_scenario.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <mutex>

#include "core/base/bf16.h"
#include "core/base/rerun_command.h"
#include "core/base/text_list.h"
#include "core/deployment/deployment_validate.h"
#include "core/lookup/tp_heads.h"
#include "core/placements/host_shared.h"
#include "core/plan/memory_fit.h"
#include "core/runtime/engram_runtime.h"
#include "core/model/hashing.h"
#include "harness/emulated_step_pricer.h"
#include "harness/scenario_check.h"
#include "harness/scenario_rank.h"
#include "core/lookup/shard_layout.h"
#include "core/base/splitmix64.h"
#include "core/model/table_fill.h"
#include "core/model/hash_overrides.h"
#include "core/model/table_spec.h"
#include "core/base/units.h"
#include "kernels/direct_table_reference.h"

namespace engram::harness {
namespace {

// The rank of the first injected fault that fired ("rank R ..."), or -1.
int first_fault_rank(const sim::FaultReport& faults) {
  for (const std::string& event : faults.fired_events) {
    int rank = -1;
    if (std::sscanf(event.c_str(), "rank %d", &rank) == 1) return rank;
    break;
  }
  return -1;
}

}  // namespace

EmulatedOutcome run_emulated_job(const EmulatedJob& job) {
  EmulatedOutcome out;
  out.deployment = job.deployment;
  WarningSink plan_sink;
  out.plan = plan_that_fits(job.deployment, plan_sink);
  if (out.plan.is_ok()) {
    out.deployment = out.plan->deployment;
    for (const Warning& w : out.plan->warnings) append_unique(out.warnings, w);
  } else {
    auto completed = validate_and_complete(job.deployment);
    if (!completed.is_ok()) {
      // Nothing to run: the deployment itself is malformed.
      out.error = out.plan.status();
      out.emulator_refused = true;
      return out;
    }
    out.deployment = std::move(completed).value();
  }
  const Deployment& d = out.deployment;

  auto model = resolve_model(job.lookup.model, job.lookup.model_hash, "lookup.model");
  if (!model.is_ok()) {
    out.error = model.status();
    out.emulator_refused = true;
    return out;
  }
  // Every rank lives in this process: refuse a run that cannot fit before
  // the tables or any rank's buffers are allocated.
  bool any_device_collective = !out.plan.is_ok();
  int ranks_per_table_copy = out.plan.is_ok() && !out.plan->ranks.empty() ? std::numeric_limits<int>::max() : 1;
  if (out.plan.is_ok())
    for (const RankPlan& r : out.plan->ranks) {
      any_device_collective |= is_device_placement(r.placement);
      ranks_per_table_copy = std::min(ranks_per_table_copy, std::max(r.shard_group_size, 1));
    }
  out.memory_estimate =
      estimate_emulator_memory(d, model.value(), job.lookup, any_device_collective, ranks_per_table_copy);
  if (const std::optional<MemoryLimit> limit = job.memory_limit ? job.memory_limit : machine_memory_limit()) {
    if (Status fits = check_emulator_memory(out.memory_estimate, *limit); !fits.is_ok()) {
      out.error = std::move(fits);
      out.emulator_refused = true;
      return out;
    }
  }
  const kernels::DirectTables& direct = scenario_direct_tables(job.lookup, model.value());

  sim::WorldSpec spec;
  spec.hosts = d.hosts;
  std::vector<int> next_gpu(d.hosts.size(), 0);
  // Ranks fill a host's GPUs in order, ranks_per_gpu to each.
  for (int host : d.rank_hosts)
    spec.ranks.push_back({host, next_gpu[static_cast<size_t>(host)]++ / d.hosts[static_cast<size_t>(host)].ranks_per_gpu});
  spec.seed = job.seed;
  spec.faults = job.faults;
  spec.reproduction = job.reproduction;
  spec.keep_trace_text = job.keep_trace_text;
  spec.keep_timeline = job.keep_timeline;
  spec.timeouts.collective_us = d.timeouts.collective_ms * 1000;
  spec.timeouts.fd_receive_us = d.timeouts.collective_ms * 1000;
  spec.timeouts.split_us = d.timeouts.join_ms * 1000;
  // Lookup steps take the step model's time (what `plan` prints) where
  // plan placed every rank; without a plan the ranks fail before any step.
  if (out.plan.is_ok() && out.plan->ranks.size() == d.rank_hosts.size())
    spec.step_pricer = emulated_step_pricer(*out.plan);
  // Name the /dev/shm segments: fixed in the emulator (its own memory, no
  // other user), so a run stays the same from its seed.
  const std::string job_id = "scenario";
  const std::string name_part(kFixedShmNamePart);
  // The host tables really built are small; tmpfs, memory cgroups and RAM
  // account each at the size of the placement model's table of that layer.
  if (auto placement_model = model_preset(d.model); placement_model.is_ok())
    for (const TableSpec& small : model.value().tables)
      for (const TableSpec& real : placement_model.value().tables)
        if (real.layer_id == small.layer_id)
          for (int t = 0; t < d.layout.tp; ++t)  // one file per TP slice, each at the real slice's size
            spec.shm_modelled_bytes[host_table_slice_segment_name(job_id, name_part, small.layer_id, d.layout.tp, t)] =
                static_cast<uint64_t>(
                    rows_of_heads(real, tp_head_slice(real.head_count(), d.layout.tp, t)).row_count) *
                real.row_bytes();

  const int world_size = static_cast<int>(spec.ranks.size());
  out.ranks.assign(static_cast<size_t>(world_size), RankOutcome{});
  ScenarioRankInputs inputs;
  inputs.options = scenario_runtime_options(d, model.value(), job_id, name_part);
  inputs.lookup = job.lookup;
  inputs.seed = job.seed;
  inputs.hashers = &direct.hashers;
  inputs.reference = [&direct](int table, const TableSpec& decoded_as, std::span<const int64_t> ids,
                                std::span<uint16_t> out) {
    direct.lookup(table, decoded_as, ids, out);
  };
  if (inputs.lookup.steps.any())
    inputs.compiled_steps = std::make_shared<const CompiledSteps>(compile_scenario_steps(inputs));
  WarningSink world_sink;

  auto run = sim::run_world(spec, [&](RankBackend& backend) -> Status {
    return run_scenario_rank(backend, inputs, world_sink, out.ranks[static_cast<size_t>(backend.world_rank)]);
  });
  if (!run.is_ok()) {
    out.error = run.status();
    out.emulator_refused = true;
    return out;
  }
  out.world = std::move(run).value();
  for (const Warning& w : world_sink.warnings()) append_unique(out.warnings, w);
  out.error = scenario_root_cause(out.world.statuses, first_fault_rank(out.world.faults));
  return out;
}

std::vector<std::string> rank_outcome_table(const EmulatedOutcome& out) {
  struct Row {
    std::vector<int> ranks;
    std::vector<std::string> hosts;  // in rank order, each once
    std::string step, status;
  };
  std::vector<Row> rows;
  const auto& statuses = out.world.statuses;
  for (size_t r = 0; r < statuses.size(); ++r) {
    const Status& st = statuses[r];
    const RankOutcome* rank = r < out.ranks.size() ? &out.ranks[r] : nullptr;
    std::string step, status;
    if (st.is_ok()) {
      step = rank && rank->looked_up ? "lookup" : rank && rank->started ? "start" : "-";
      status = "ok";
    } else {
      step = st.context().step.empty() ? "-" : st.context().step;
      status = fmt::format("{}: {}", error_code_name(st.code()), st.message());
    }
    const int host = r < out.deployment.rank_hosts.size() ? out.deployment.rank_hosts[r] : -1;
    const std::string host_name = host >= 0 && static_cast<size_t>(host) < out.deployment.hosts.size()
                                      ? out.deployment.hosts[static_cast<size_t>(host)].name
                                      : "-";
    // Ranks alike share one line, in order of their first rank.
    auto same = std::find_if(rows.begin(), rows.end(),
                             [&](const Row& row) { return row.step == step && row.status == status; });
    if (same == rows.end()) same = rows.insert(rows.end(), Row{{}, {}, step, status});
    Row& row = *same;
    row.ranks.push_back(static_cast<int>(r));
    if (std::find(row.hosts.begin(), row.hosts.end(), host_name) == row.hosts.end()) row.hosts.push_back(host_name);
  }
  std::vector<std::string> lines;
  size_t rank_width = 4, host_width = 4, step_width = 9;
  std::vector<std::array<std::string, 4>> cells;
  for (const Row& row : rows) {
    const std::string ranks = row.ranks.size() == 1 ? fmt::format("rank {}", row.ranks[0])
                                                    : fmt::format("ranks {}", compress_ranges(row.ranks));
    const std::string hosts = row.hosts.size() == 1
                                  ? row.hosts[0]
                                  : fmt::format("{}..{} ({} hosts)", row.hosts.front(), row.hosts.back(),
                                                row.hosts.size());
    cells.push_back({ranks, hosts, row.step, row.status});
    rank_width = std::max(rank_width, ranks.size());
    host_width = std::max(host_width, hosts.size());
    step_width = std::max(step_width, row.step.size());
  }
  if (cells.empty()) return lines;
  lines.push_back(fmt::format("{:<{}}  {:<{}}  {:<{}}  {}", "rank", rank_width, "host", host_width, "last step",
                              step_width, "status"));
  for (const auto& c : cells)
    lines.push_back(fmt::format("{:<{}}  {:<{}}  {:<{}}  {}", c[0], rank_width, c[1], host_width, c[2], step_width,
                                c[3]));
  return lines;
}

std::string placement_summary(const EmulatedOutcome& outcome) {
  return scenario_placement_summary(outcome.plan, outcome.ranks);
}

Result<sim::FaultPlan> fault_plan_of(const Scenario& scenario) {
  sim::FaultPlan plan;
  for (const ScenarioFault& f : scenario.planned_faults) {
    ENGRAM_ASSIGN_OR_RETURN(sim::FaultSite site, sim::parse_fault_site(f.site));
    plan.plan(site, f.rank, f.occurrence, f.at, f.delay_ms * 1000, sim::SlowFactors{f.link_factor, f.gpu_factor});
  }
  for (const ScenarioFaultRate& r : scenario.fault_rates) {
    ENGRAM_ASSIGN_OR_RETURN(sim::FaultSite site, sim::parse_fault_site(r.site));
    plan.with_rate(site, r.probability);
  }
  if (scenario.slow_delay_ms) plan.slow_delay_us = *scenario.slow_delay_ms * 1000;
  return plan;
}

namespace {

// run_scenario, the run kept in `out`.
ScenarioOutcome run_and_check(const Scenario& scenario, std::optional<uint64_t> seed_override, EmulatedOutcome& out,
                              bool keep_timeline, std::optional<MemoryLimit> memory_limit) {
  const auto started = std::chrono::steady_clock::now();
  ScenarioOutcome result;
  result.name = scenario.name;
  result.source = scenario.source;
  result.seed = seed_override.value_or(scenario.seed);
  result.reproduction = rerun_command(
      {"scenario", "run", absolute_file_path(scenario.source), "--seed", std::to_string(result.seed)});
  std::vector<std::string>& fail = result.failures;

  auto faults = fault_plan_of(scenario);
  if (!faults.is_ok()) {
    fail.push_back(faults.status().to_string());
    return result;
  }
  EmulatedJob job;
  job.deployment = scenario.deployment;
  job.seed = result.seed;
  job.faults = std::move(faults).value();
  job.lookup = scenario.lookup;
  job.reproduction = result.reproduction;
  job.memory_limit = std::move(memory_limit);
  job.keep_timeline = keep_timeline;
  out = run_emulated_job(job);
  const ScenarioExpect& x = scenario.expect;

  result.placement = placement_summary(out);
  result.placements = scenario_placement_counts(out.plan, out.ranks);
  result.warning_count = out.warnings.size();
  result.warnings = out.warnings;
  for (const Warning& w : out.warnings) result.warning_texts.push_back(w.text);
  result.trace_hash = out.world.trace_hash;
  result.step_times = summarize_step_times(out.world.step_times);
  result.faults = out.world.faults;
  result.coverage = out.world.coverage;
  if (out.error) {
    result.error_kind = error_code_name(out.error->code());
    result.error_text = out.error->to_string();
    result.error = out.error;
  }

  // Nothing may outlive a run, whatever its outcome.
  if (!out.world.leaks.empty()) fail.push_back("leaks after the run: " + sim::Ledger::format(out.world.leaks, 5));

  check_scenario_error(x, out.error, fail);
  if (out.emulator_refused) {
    result.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    result.passed = fail.empty();
    return result;
  }

  check_scenario_decisions(x, out.plan, out.error, out.ranks, out.warnings, !out.world.faults.fired_events.empty(),
                           fail);

  // Memory, as plan shows it.
  if (x.hbm_per_gpu || x.host_per_node || x.host_per_rank || x.copies_per_node) {
    if (!out.plan.is_ok()) {
      fail.push_back("expect.memory: plan refused the deployment, so it shows no memory: " +
                     out.plan.status().to_string());
    } else {
      uint64_t hbm = 0, host = 0, rank_host = 0;
      int copies = 0;
      for (const HostMemory& h : out.plan->hosts) {
        hbm = std::max(hbm, h.hbm_bytes_per_gpu_max);
        host = std::max(host, h.host_table_bytes);
        copies = std::max(copies, h.table_copies);
      }
      for (const RankPlan& r : out.plan->ranks)
        rank_host = std::max(rank_host, r.memory.host_private_bytes + r.memory.host_shared_mapped_bytes);
      if (x.hbm_per_gpu && !x.hbm_per_gpu->matches(hbm))
        fail.push_back(fmt::format("memory: hbm_per_gpu expected {}, plan shows {} ({} bytes)", x.hbm_per_gpu->text,
                                   format_gib(hbm), hbm));
      if (x.host_per_node && !x.host_per_node->matches(host))
        fail.push_back(fmt::format("memory: host_per_node expected {}, plan shows {} ({} bytes)",
                                   x.host_per_node->text, format_gib(host), host));
      if (x.host_per_rank && !x.host_per_rank->matches(rank_host))
        fail.push_back(fmt::format("memory: host_per_rank expected {}, plan shows {} ({} bytes)",
                                   x.host_per_rank->text, format_gib(rank_host), rank_host));
      if (x.copies_per_node && *x.copies_per_node != copies)
        fail.push_back(fmt::format("memory: copies_per_node expected {}, plan shows {}", *x.copies_per_node, copies));
    }
  }

  check_scenario_handle_types(x, out.plan, out.ranks, fail);

  check_scenario_lookups(x, out.ranks, fail);
  check_step_times(x.step_time_us_max, result.step_times, fail);

  // Faults.
  for (const std::string& name : x.faults_fired) {
    auto site = sim::parse_fault_site(name);
    if (site.is_ok() && out.world.faults.fired(site.value()) == 0)
      fail.push_back(fmt::format("fault site {} never fired (reached {} times)", name,
                                 out.world.faults.reached(site.value())));
  }
  for (const sim::PlannedFault& f : out.world.faults.never_fired)
    fail.push_back(fmt::format("planned fault {} on rank {} (occurrence {}{}) never fired: the scenario tested "
                               "nothing there",
                               sim::fault_site_name(f.site), f.rank, f.occurrence, f.at.empty() ? "" : ", at " + f.at));

  if (x.shm_remote_numa_maps && out.world.shm_remote_numa_maps != *x.shm_remote_numa_maps)
    fail.push_back(fmt::format("shm_remote_numa_maps: expected {} host-table maps across sockets, the run made {}",
                               *x.shm_remote_numa_maps, out.world.shm_remote_numa_maps));
  // Every run ends within its bound in simulated time, with no wait left
  // to deadlock detection.
  if (!out.world.live()) fail.push_back(out.world.liveness_text());

  result.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  result.passed = fail.empty();
  if (!result.passed) result.rank_table = rank_outcome_table(out);
  return result;
}

}  // namespace

ScenarioOutcome run_scenario(const Scenario& scenario, std::optional<uint64_t> seed_override, EmulatedOutcome* run,
                             std::optional<MemoryLimit> memory_limit) {
  EmulatedOutcome out;
  ScenarioOutcome result = run_and_check(scenario, seed_override, out, run != nullptr, std::move(memory_limit));
  if (run != nullptr) *run = std::move(out);
  return result;
}

}  // namespace engram::harness
