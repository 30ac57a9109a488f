#include "sim/scenario_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>

#include "core/bf16.h"
#include "core/deployment_validate.h"
#include "core/engram_runtime.h"
#include "core/hashing.h"
#include "core/shard_layout.h"
#include "core/splitmix64.h"
#include "core/table_fill.h"
#include "core/table_spec.h"
#include "core/units.h"
#include "kernels/gather_reference.h"

namespace engram::sim {
namespace {

constexpr uint64_t kFillSeed = 1;  // RuntimeOptions' default: the direct lookup fills the same bytes

// Rank r's tokens: every fourth rank is an idle replica (no tokens); every
// fifth token is DEAD (an image token); ids from the seed and the rank.
std::vector<int64_t> tokens_of(const ModelSpec& model, uint64_t seed, int rank, int tokens) {
  const int count = rank % 4 == 3 ? 0 : tokens;
  std::vector<int64_t> out(static_cast<size_t>(count));
  for (int t = 0; t < count; ++t)
    out[static_cast<size_t>(t)] =
        t % 5 == 4 ? kDeadId
                   : static_cast<int64_t>(splitmix64_at(seed ^ 0x70c3e5ull, static_cast<uint64_t>(rank) * 65536 + t) %
                                          static_cast<uint64_t>(model.vocab_size - 1));
  return out;
}

// The whole table of the lookup model, filled as every placement fills it,
// and a direct dequantised lookup against it (the GPU kernel's CPU reference
// over a single shard: independent of the placements' row loops).
struct DirectTables {
  ModelSpec model_storage;
  const ModelSpec* model = nullptr;
  std::vector<std::vector<std::byte>> whole;
  std::vector<TableHasher> hashers;

  void lookup(int table, std::span<const int64_t> ids, std::span<uint16_t> out) const {
    const TableSpec& spec = model->tables[static_cast<size_t>(table)];
    RowShardLayout layout(spec.row_count(), 1);
    std::span<const std::byte> shard(whole[static_cast<size_t>(table)]);
    kernels::gather_peer_reference(spec, layout, std::span<const std::span<const std::byte>>(&shard, 1), ids, out);
  }
};

// Filled once per model and kept: a sweep runs thousands of jobs on the same
// small tables, and the bytes depend only on (model, fill seed).
const DirectTables& direct_tables(const std::string& name, const ModelSpec& model) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<DirectTables>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& entry = cache[name];
  if (!entry) {
    entry = std::make_unique<DirectTables>();
    entry->model_storage = model;
    entry->model = &entry->model_storage;
    for (size_t t = 0; t < model.tables.size(); ++t) {
      const TableSpec& spec = model.tables[t];
      entry->whole.emplace_back(spec.table_bytes());
      fill_table_rows(spec, kFillSeed, 0, entry->whole.back());
      auto hasher = TableHasher::create(model, static_cast<int>(t));
      ENGRAM_CHECK(hasher.is_ok());
      entry->hashers.push_back(std::move(hasher).value());
    }
  }
  // A preset's name fixes its structure; a different spec under the same name is a broken contract.
  ENGRAM_CHECK(entry->model->tables.size() == model.tables.size() && entry->model->seed == model.seed);
  return *entry;
}

// The root cause among failed ranks: the rank of the first injected fault
// when one fired and that rank failed; otherwise start at the lowest failed
// rank and follow "rank P failed" (unavailable naming a failed peer) to it.
std::optional<Status> root_cause(const std::vector<Status>& statuses, const FaultReport& faults) {
  for (const std::string& event : faults.fired_events) {
    int rank = -1;
    if (std::sscanf(event.c_str(), "rank %d", &rank) == 1 && rank >= 0 &&
        rank < static_cast<int>(statuses.size()) && !statuses[static_cast<size_t>(rank)].is_ok())
      return statuses[static_cast<size_t>(rank)];
    break;
  }
  int at = -1;
  for (size_t r = 0; r < statuses.size(); ++r)
    if (!statuses[r].is_ok()) { at = static_cast<int>(r); break; }
  if (at < 0) return std::nullopt;
  std::vector<bool> seen(statuses.size(), false);
  for (;;) {
    seen[static_cast<size_t>(at)] = true;
    const Status& s = statuses[static_cast<size_t>(at)];
    const int peer = s.context().peer;
    if (s.code() != ErrorCode::kUnavailable || peer < 0 || peer >= static_cast<int>(statuses.size()) ||
        seen[static_cast<size_t>(peer)] || statuses[static_cast<size_t>(peer)].is_ok())
      return s;
    at = peer;
  }
}

std::string first_difference(std::span<const uint16_t> want, std::span<const uint16_t> got, int dim) {
  for (size_t i = 0; i < want.size(); ++i)
    if (!bf16_same(want[i], got[i]))
      return fmt::format("value {} (row entry {}, element {}): direct 0x{:04x}, placement 0x{:04x}", i,
                         i / static_cast<size_t>(dim), i % static_cast<size_t>(dim), want[i], got[i]);
  return {};
}

}  // namespace

EmulatedOutcome run_emulated_job(const EmulatedJob& job) {
  EmulatedOutcome out;
  out.deployment = job.deployment;
  WarningSink plan_sink;
  out.plan = plan_deployment(job.deployment, plan_sink);
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

  auto model = model_preset(job.lookup.model);
  if (!model.is_ok()) {
    out.error = model.status();
    out.emulator_refused = true;
    return out;
  }
  const DirectTables& direct = direct_tables(job.lookup.model, model.value());

  WorldSpec spec;
  spec.hosts = d.hosts;
  std::vector<int> next_gpu(d.hosts.size(), 0);
  for (int host : d.rank_hosts) spec.ranks.push_back({host, next_gpu[static_cast<size_t>(host)]++});
  spec.seed = job.seed;
  spec.faults = job.faults;
  spec.reproduction = job.reproduction;
  spec.keep_trace_text = job.keep_trace_text;

  const int world_size = static_cast<int>(spec.ranks.size());
  out.ranks.assign(static_cast<size_t>(world_size), RankOutcome{});
  RuntimeOptions options;
  options.placement_model = d.model;
  options.table_model = model.value();
  options.layout = d.layout;
  options.config = d.config;
  options.job_id = "scenario";
  options.fill_seed = kFillSeed;
  const int slot = std::max(1, job.lookup.tokens);
  WarningSink world_sink;

  auto run = run_world(spec, [&](RankBackend& backend) -> Status {
    const int r = backend.world_rank;
    RankOutcome& mine = out.ranks[static_cast<size_t>(r)];
    ENGRAM_ASSIGN_OR_RETURN(auto runtime, EngramRuntime::start(backend, options, world_sink));
    mine.started = true;
    mine.placement = runtime->placement();
    mine.handle_type = runtime->facts().handle_type;
    if (job.lookup.run) {
      const std::vector<int64_t> tokens = tokens_of(*direct.model, job.seed, r, job.lookup.tokens);
      for (size_t t = 0; t < direct.model->tables.size(); ++t) {
        const TableSpec& table = direct.model->tables[t];
        const size_t heads = static_cast<size_t>(table.head_count());
        std::vector<int64_t> ids(tokens.size() * heads);
        Status hashed = direct.hashers[t].hash(tokens, {}, ids);
        ENGRAM_CHECK(hashed.is_ok());
        // One id past the table: a zero row on every path, never row 0.
        if (!ids.empty()) ids.back() = table.row_count() + r;
        std::vector<uint16_t> got(ids.size() * static_cast<size_t>(table.dim), 0xdead);
        Status looked = runtime->lookup(static_cast<int>(t), ids, slot, got);
        if (!looked.is_ok()) {
          runtime->stop().ignore();
          return looked;
        }
        std::vector<uint16_t> want(got.size());
        direct.lookup(static_cast<int>(t), ids, want);
        if (mine.lookup_mismatch.empty()) {
          std::string diff = first_difference(want, got, table.dim);
          if (!diff.empty())
            mine.lookup_mismatch = fmt::format("table {} (layer {}): {}", t, table.layer_id, diff);
        }
      }
      mine.looked_up = true;
    }
    return runtime->stop();
  });
  if (!run.is_ok()) {
    out.error = run.status();
    out.emulator_refused = true;
    return out;
  }
  out.world = std::move(run).value();
  for (const Warning& w : world_sink.warnings()) append_unique(out.warnings, w);
  out.error = root_cause(out.world.statuses, out.world.faults);
  return out;
}

std::string placement_summary(const EmulatedOutcome& outcome) {
  // Per rank: what the runtime decided, else what plan decided.
  std::vector<std::pair<Placement, int>> counts;
  for (size_t r = 0; r < outcome.ranks.size(); ++r) {
    std::optional<Placement> p;
    if (outcome.ranks[r].started) p = outcome.ranks[r].placement;
    else if (outcome.plan.is_ok() && r < outcome.plan->ranks.size()) p = outcome.plan->ranks[r].placement;
    if (!p) continue;
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == *p; });
    if (it == counts.end()) counts.push_back({*p, 1});
    else ++it->second;
  }
  if (counts.empty()) return "-";
  if (counts.size() == 1) return placement_name(counts[0].first);
  std::string text;
  for (const auto& [p, n] : counts) text += fmt::format("{}{} x{}", text.empty() ? "" : ", ", placement_name(p), n);
  return text;
}

Result<FaultPlan> fault_plan_of(const Scenario& scenario) {
  FaultPlan plan;
  for (const ScenarioFault& f : scenario.planned_faults) {
    ENGRAM_ASSIGN_OR_RETURN(FaultSite site, parse_fault_site(f.site));
    plan.plan(site, f.rank, f.occurrence, f.at);
  }
  for (const ScenarioFaultRate& r : scenario.fault_rates) {
    ENGRAM_ASSIGN_OR_RETURN(FaultSite site, parse_fault_site(r.site));
    plan.with_rate(site, r.probability);
  }
  return plan;
}

ScenarioOutcome run_scenario(const Scenario& scenario, std::optional<uint64_t> seed_override) {
  const auto started = std::chrono::steady_clock::now();
  ScenarioOutcome result;
  result.name = scenario.name;
  result.source = scenario.source;
  result.seed = seed_override.value_or(scenario.seed);
  result.reproduction = fmt::format("engramlab scenario run {} --seed {}", scenario.source, result.seed);
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
  EmulatedOutcome out = run_emulated_job(job);
  const ScenarioExpect& x = scenario.expect;
  const int world_size = static_cast<int>(out.ranks.size());

  result.placement = placement_summary(out);
  result.warning_count = out.warnings.size();
  result.trace_hash = out.world.trace_hash;
  result.faults = out.world.faults;
  result.coverage = out.world.coverage;
  if (out.error) {
    result.error_kind = error_code_name(out.error->code());
    result.error_text = out.error->to_string();
  }

  // Nothing may outlive a run, whatever its outcome.
  if (!out.world.leaks.empty()) fail.push_back("leaks after the run: " + Ledger::format(out.world.leaks, 5));

  // The error, or none.
  if (x.error) {
    if (!out.error) {
      fail.push_back(fmt::format("expected a {} error, but every rank succeeded", error_code_name(x.error->kind)));
    } else {
      const Status& e = *out.error;
      if (e.code() != x.error->kind)
        fail.push_back(fmt::format("error kind: expected {}, got {}: {}", error_code_name(x.error->kind),
                                   error_code_name(e.code()), e.to_string()));
      for (const std::string& word : x.error->contains)
        if (e.message().find(word) == std::string::npos)
          fail.push_back(fmt::format("error message lacks '{}': {}", word, e.to_string()));
      if (x.error->rank && e.context().rank != *x.error->rank)
        fail.push_back(fmt::format("error rank: expected {}, got {}: {}", *x.error->rank, e.context().rank, e.to_string()));
      if (x.error->step && e.context().step != *x.error->step)
        fail.push_back(fmt::format("error step: expected '{}', got '{}': {}", *x.error->step, e.context().step,
                                   e.to_string()));
    }
  } else if (out.error) {
    fail.push_back("expected success, got: " + out.error->to_string());
  }
  if (out.emulator_refused) {
    result.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    result.passed = fail.empty();
    return result;
  }

  // Plan and runtime decide alike: a plan refusal fails every rank with the
  // same kind; otherwise every started rank placed as plan did.
  if (!out.plan.is_ok()) {
    for (int r = 0; r < world_size; ++r)
      if (out.ranks[static_cast<size_t>(r)].started) {
        fail.push_back(fmt::format("plan refused the deployment ({}), but rank {} started",
                                   out.plan.status().to_string(), r));
        break;
      }
    if (out.error && out.error->code() != out.plan.status().code())
      fail.push_back(fmt::format("plan refused with {}, the runtime failed with {}", out.plan.status().to_string(),
                                 out.error->to_string()));
  } else {
    for (int r = 0; r < world_size; ++r) {
      const RankOutcome& o = out.ranks[static_cast<size_t>(r)];
      if (o.started && o.placement != out.plan->ranks[static_cast<size_t>(r)].placement)
        fail.push_back(fmt::format("rank {}: the runtime placed {}, plan placed {}", r, placement_name(o.placement),
                                   placement_name(out.plan->ranks[static_cast<size_t>(r)].placement)));
    }
  }

  // Placements.
  for (const ExpectedPlacement& p : x.placements) {
    const int last = p.last_rank < 0 ? world_size - 1 : p.last_rank;
    if (last >= world_size) {
      fail.push_back(fmt::format("expect.placement names ranks {}-{}, but the job has {} ranks", p.first_rank, last,
                                 world_size));
      continue;
    }
    for (int r = p.first_rank; r <= last; ++r) {
      const RankOutcome& o = out.ranks[static_cast<size_t>(r)];
      std::optional<Placement> actual;
      if (o.started) actual = o.placement;
      else if (out.plan.is_ok()) actual = out.plan->ranks[static_cast<size_t>(r)].placement;
      if (!actual) {
        fail.push_back(fmt::format("placement: expected {} for rank {}, but none was decided ({})",
                                   placement_name(p.placement), r, out.plan.status().to_string()));
        break;
      }
      if (*actual != p.placement) {
        fail.push_back(fmt::format("placement: expected {} for rank {}, got {}", placement_name(p.placement), r,
                                   placement_name(*actual)));
        break;
      }
    }
  }

  // Warnings.
  if (x.warnings) {
    std::string seen;
    for (const Warning& w : out.warnings) seen += fmt::format("\n    [{}] {}", w.key, w.text);
    if (x.warnings->empty() && !out.warnings.empty())
      fail.push_back(fmt::format("expected no warnings, got {}:{}", out.warnings.size(), seen));
    for (const std::string& word : *x.warnings) {
      bool found = std::any_of(out.warnings.begin(), out.warnings.end(),
                               [&](const Warning& w) { return w.text.find(word) != std::string::npos; });
      if (!found)
        fail.push_back(fmt::format("no warning contains '{}'; warnings:{}", word, seen.empty() ? " none" : seen));
    }
  }

  // Memory, as plan shows it.
  if (x.hbm_per_gpu || x.host_per_node) {
    if (!out.plan.is_ok()) {
      fail.push_back("expect.memory: plan refused the deployment, so it shows no memory: " +
                     out.plan.status().to_string());
    } else {
      uint64_t hbm = 0, host = 0;
      for (const HostMemory& h : out.plan->hosts) {
        hbm = std::max(hbm, h.hbm_bytes_per_gpu_max);
        host = std::max(host, h.host_table_bytes);
      }
      if (x.hbm_per_gpu && !x.hbm_per_gpu->matches(hbm))
        fail.push_back(fmt::format("memory: hbm_per_gpu expected {}, plan shows {} ({} bytes)", x.hbm_per_gpu->text,
                                   format_gib(hbm), hbm));
      if (x.host_per_node && !x.host_per_node->matches(host))
        fail.push_back(fmt::format("memory: host_per_node expected {}, plan shows {} ({} bytes)",
                                   x.host_per_node->text, format_gib(host), host));
    }
  }

  // Handle type: what the runtime agreed on; plan's prediction when no rank
  // got that far.
  if (x.handle_type) {
    std::optional<HandleType> actual;
    std::string from;
    for (int r = 0; r < world_size && !actual; ++r)
      if (out.ranks[static_cast<size_t>(r)].handle_type) {
        actual = out.ranks[static_cast<size_t>(r)].handle_type;
        from = fmt::format("the runtime (rank {})", r);
      }
    for (int r = 0; r < world_size; ++r) {
      const auto& h = out.ranks[static_cast<size_t>(r)].handle_type;
      if (h && actual && *h != *actual)
        fail.push_back(fmt::format("ranks disagree on the handle type: {} vs {} at rank {}", handle_type_name(*actual),
                                   handle_type_name(*h), r));
    }
    if (!actual && out.plan.is_ok())
      for (const PlacementGroupSummary& g : out.plan->groups)
        if (g.handle_type) {
          actual = g.handle_type;
          from = "plan";
          break;
        }
    if (!actual)
      fail.push_back(fmt::format("handle type: expected {}, but no device_peer group chose one",
                                 handle_type_name(*x.handle_type)));
    else if (*actual != *x.handle_type)
      fail.push_back(fmt::format("handle type: expected {}, {} chose {}", handle_type_name(*x.handle_type), from,
                                 handle_type_name(*actual)));
  }

  // Lookups: any mismatch fails; lookup_equal also demands every rank looked up.
  for (int r = 0; r < world_size; ++r) {
    const RankOutcome& o = out.ranks[static_cast<size_t>(r)];
    if (!o.lookup_mismatch.empty())
      fail.push_back(fmt::format("rank {} ({}): lookup differs from the direct lookup: {}", r,
                                 placement_name(o.placement), o.lookup_mismatch));
    if (x.lookup_equal && !o.looked_up) {
      fail.push_back(fmt::format("lookup_equal: rank {} did not complete its lookups", r));
      break;
    }
  }

  // Faults.
  for (const std::string& name : x.faults_fired) {
    auto site = parse_fault_site(name);
    if (site.is_ok() && out.world.faults.fired(site.value()) == 0)
      fail.push_back(fmt::format("fault site {} never fired (reached {} times)", name,
                                 out.world.faults.reached(site.value())));
  }
  for (const PlannedFault& f : out.world.faults.never_fired)
    fail.push_back(fmt::format("planned fault {} on rank {} (occurrence {}{}) never fired: the scenario tested "
                               "nothing there",
                               fault_site_name(f.site), f.rank, f.occurrence, f.at.empty() ? "" : ", at " + f.at));

  result.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  result.passed = fail.empty();
  return result;
}

}  // namespace engram::sim
