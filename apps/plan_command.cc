// `engramlab plan`: resolve a deployment's Engram config, decide each rank's
// placement and show what it costs, before anything runs (docs/design.md sections 1-3).
// Input: flags, or --file deployment.yaml with flags overriding it.
// Exit codes: 0 planned; 1 the deployment cannot work as asked (strict
// dp_shared_memory, no handle type, the memory fit: tables beyond a GPU or a
// host's RAM, a /dev/shm copy beyond a sizeLimit, a memory limit below what
// its ranks hold, nothing left for the KV cache unless --allow-negative-kv);
// 2 bad input.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include <charconv>
#include <unistd.h>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <string>

#include "apps/command_registry.h"
#include "apps/engine_command_line.h"
#include "core/base/check.h"
#include "core/base/fixes_once.h"
#include "apps/flag_numbers.h"
#include "apps/flag_spellings.h"
#include "apps/plan_sweep.h"
#include "core/plan/deployment_plan.h"
#include "core/deployment/runtime_environment.h"
#include "core/deployment_file/deployment_yaml.h"
#include "core/deployment/shard_groups.h"
#include "core/model/gpu_models.h"
#include "core/engines/engine_profile.h"
#include "core/base/json_output.h"
#include "core/plan/memory_fit.h"
#include "core/plan/plan_explain.h"
#include "core/report/engine_comparison.h"
#include "core/report/plan_report.h"
#include "core/report/step_time_report.h"
#include "core/plan/step_calibration.h"
#include "core/plan/step_time_plan.h"
#include "core/base/text_excerpt.h"
#include "core/base/terminal_colour.h"
#include "core/base/units.h"
#include "harness/scenario.h"
#include "harness/scenario_emit.h"

namespace engram::app {
namespace {

// A memory size flag: 0 bytes is no memory, and leaving the flag out is how
// to ask for the GPU model's figure, so an explicit 0 is refused.
Result<uint64_t> memory_flag_bytes(const std::string& text, const char* flag, const char* of) {
  ENGRAM_ASSIGN_OR_RETURN(const uint64_t bytes, parse_bytes(text, flag));
  if (bytes == 0) {
    return invalid_argument(fmt::format("{} {}: that is no memory; {} has some: give its size (e.g. 141GiB), or leave {} "
                                        "out for the GPU model's figure",
                                        flag, excerpt(text), of, flag));
  }
  return bytes;
}

struct PlanFlags {
  std::string file, model, hosts, gpus_per_host, gpu_model, gpu_memory, shm_size, nvlink_domain;
  std::string no_shm, imex_channel, fabric_attribute;  // flags: "true" when given bare
  std::string tp, dp, ep, prefill_cp, elastic_ep, enable_expert_parallel;
  std::string cpu_offload, peer_shards, dp_shared_memory, shard_group, tokens_per_rank, sequence_parallel;
  std::string rank_hosts;
  std::string host_memory, gpu_memory_fraction, gpu_reserved, environment;
  std::string memory_limit, memory_limit_per_rank, shm_size_limit;  // containers
  std::string context_length, allow_negative_kv;
  std::string engine, host_layout, thp_packing, embedding_across_dp, extra_ranks;
  std::string tokens, calibration;
  std::vector<std::string> sweep;  // --sweep KEY=V1,V2 ... (apps/plan_sweep.h)
  std::string sweep_svg;           // --sweep-svg FILE: the sweep's frontier (apps/plan_sweep_svg.h)  // step times: token counts, a bench CSV to fit the model on
  bool calibration_check = false;  // judge --calibration's points with the built-in constants, no fit
  std::string from;  // --from: an engine's command line, read into the flags above (core: engine_command_line.h)
  bool emit_deployment = false;  // --emit-deployment: the deployment as a file, instead of the plan
  bool compare_engines = false;
  bool explain = false;
  bool json = false;
  std::string given_empty;  // a flag given an empty value (`--file ''`): refused, not taken as absent
};

Result<bool> parse_bool(const std::string& text, const char* flag) {
  if (text == "true" || text == "1" || text == "yes" || text == "on") return true;
  if (text == "false" || text == "0" || text == "no" || text == "off") return false;
  return invalid_argument(fmt::format("{}: '{}' is not a boolean; write {} or {}=false", flag, excerpt(text), flag, flag));
}

// Applies a flag's value only when the user gave it (flags override the file).
template <typename T, typename Parse>
Status apply(const std::string& text, T& field, Parse parse) {
  if (text.empty()) return Status::ok();
  auto value = parse(text);
  if (!value.is_ok()) return std::move(value).take_status();
  field = value.value();
  return Status::ok();
}

Result<Deployment> build_deployment(const PlanFlags& f) {
  // An empty text means "not given" below, so an empty value given on
  // purpose would be dropped without a word.
  if (!f.given_empty.empty()) {
    return invalid_argument(fmt::format("{}: '' is empty; give {} a value, or leave it out", f.given_empty,
                                        f.given_empty));
  }
  Deployment d;
  const bool from_file = !f.file.empty();
  if (from_file) {
    Result<Deployment> loaded = load_deployment_file(f.file);
    if (!loaded.is_ok() && loaded.status().code() == ErrorCode::kInvalidArgument) {
      // A scenario file is a deployment with faults and expectations: its
      // deployment plans (the rest is `scenario run`'s), instead of an
      // unknown-field error for each of its scenario fields.
      if (Result<harness::Scenario> scenario = harness::load_scenario_file(f.file); scenario.is_ok()) {
        std::cerr << fmt::format("plan: {} is a scenario file: its deployment is planned here (its faults and "
                                 "expectations are what `engramlab scenario run` checks)\n",
                                 excerpt(f.file, 200));
        loaded = std::move(scenario->deployment);
      }
    }
    ENGRAM_ASSIGN_OR_RETURN(d, std::move(loaded));
  }
  if (!f.model.empty()) d.model = f.model;

  // Layout first: the default GPUs per host follow from it.
  auto int_of = [](const char* flag, int min_value, int max_value) {
    return [=](const std::string& t) { return whole_number_flag<int>(flag, t, min_value, max_value); };
  };
  auto bool_of = [](const char* flag) { return [flag](const std::string& t) { return parse_bool(t, flag); }; };
  ENGRAM_RETURN_IF_ERROR(apply(f.tp, d.layout.tp, int_of("--tp", 1, kMaxRanks)));
  ENGRAM_RETURN_IF_ERROR(apply(f.dp, d.layout.dp, int_of("--dp", 1, kMaxRanks)));
  ENGRAM_RETURN_IF_ERROR(apply(f.ep, d.layout.ep, int_of("--ep", 1, kMaxRanks)));
  ENGRAM_RETURN_IF_ERROR(apply(f.prefill_cp, d.layout.prefill_cp, int_of("--prefill-cp", 1, kMaxRanks)));
  ENGRAM_RETURN_IF_ERROR(apply(f.extra_ranks, d.layout.extra_ranks, int_of("--extra-ranks", 0, kMaxRanks)));
  ENGRAM_RETURN_IF_ERROR(apply(f.elastic_ep, d.layout.elastic_ep, bool_of("--elastic-ep")));
  bool expert_parallel_everywhere = false;
  ENGRAM_RETURN_IF_ERROR(apply(f.enable_expert_parallel, expert_parallel_everywhere, bool_of("--enable-expert-parallel")));
  if (expert_parallel_everywhere) {
    if (!f.ep.empty())
      return invalid_argument("--enable-expert-parallel: sets ep = tp x dp, as vLLM does; give it or --ep N, not both");
    d.layout.ep = d.layout.world_size();
  }

  // Hosts: from flags alone, or the file's hosts with flags applied to each.
  int host_count = from_file ? static_cast<int>(d.hosts.size()) : 1;
  ENGRAM_RETURN_IF_ERROR(apply(f.hosts, host_count, int_of("--hosts", 1, kMaxHosts)));
  if (!from_file || !f.hosts.empty()) {
    HostSpec base;
    base.tmpfs_bytes_total = kDockerDefaultShmBytes;
    if (from_file && !d.hosts.empty()) base = d.hosts.front();
    const bool bare_metal = f.environment == "bare_metal";  // its /dev/shm default is half the RAM (validation)
    if (!from_file && f.shm_size.empty() && f.no_shm.empty() && !bare_metal) {
      d.defaults_used.push_back({"--shm-size", "64 MiB",
                                 "Docker's default /dev/shm; give --shm-size (what `df -h /dev/shm` shows on the "
                                 "hosts)"});
    }
    if (f.gpus_per_host.empty() && !from_file) {
      const int world = d.layout.world_size() + d.layout.extra_ranks;
      if (world % host_count != 0) {
        return invalid_argument(fmt::format("--gpus-per-host: not given and tp * dp{} = {} ranks do not divide over "
                                            "{} hosts; give --gpus-per-host",
                                            d.layout.extra_ranks ? " + extra ranks" : "", world, host_count));
      }
      base.gpu_count = world / host_count;
    }
    d.hosts.clear();
    d.rank_hosts.clear();  // the file's map was for its hosts
    for (int h = 0; h < host_count; ++h) {
      HostSpec host = base;
      host.name = fmt::format("node-{}", h);
      host.boot_id.clear();
      d.hosts.push_back(std::move(host));
    }
  }
  if (!f.gpu_model.empty()) {
    // Checked here, so its error names the flag (not hosts[0], a host the flags made).
    if (auto model = find_gpu_model(f.gpu_model); !model.is_ok()) {
      std::string message = model.status().message();
      if (message.starts_with("gpu_model: ")) message.erase(0, 11);
      return invalid_argument("--gpu-model: " + message);
    }
  }
  for (HostSpec& h : d.hosts) {
    ENGRAM_RETURN_IF_ERROR(apply(f.gpus_per_host, h.gpu_count, int_of("--gpus-per-host", 1, kMaxGpusPerHost)));
    if (!f.gpu_model.empty()) {
      h.gpu_model = f.gpu_model;
      if (f.gpu_memory.empty()) h.gpu_memory_bytes = 0;  // the new model's default
    }
    ENGRAM_RETURN_IF_ERROR(apply(f.gpu_memory, h.gpu_memory_bytes,
                                 [](const std::string& t) { return memory_flag_bytes(t, "--gpu-memory", "a GPU"); }));
    ENGRAM_RETURN_IF_ERROR(apply(f.host_memory, h.host_memory_bytes,
                                 [](const std::string& t) { return memory_flag_bytes(t, "--host-memory", "a host"); }));
    if (!f.environment.empty()) {
      ENGRAM_ASSIGN_OR_RETURN(h.environment, parse_runtime_environment(f.environment, "--environment"));
    }
    if (!f.shm_size.empty()) {
      ENGRAM_ASSIGN_OR_RETURN(h.tmpfs_bytes_total, parse_bytes(f.shm_size, "--shm-size"));
      h.shm_mounted = true;
      h.shm_size_written = true;
    }
    bool no_shm = false;
    ENGRAM_RETURN_IF_ERROR(apply(f.no_shm, no_shm, bool_of("--no-shm")));
    if (no_shm) {
      if (!f.shm_size.empty()) return invalid_argument("--no-shm: cannot be given with --shm-size; pick one");
      h.shm_mounted = false;
      h.tmpfs_bytes_total = 0;
    }
    // Container limits; a limit of 0 bytes is a limit (every byte refused), as in a deployment file.
    // On Kubernetes a limit reads as the pod spec's quantity (200G = 200 x 10^9).
    const SizeUnits limit_units = memory_limit_units(h.environment);
    if (!f.memory_limit.empty()) {
      ENGRAM_ASSIGN_OR_RETURN(h.memory_limit_bytes, parse_bytes(f.memory_limit, "--memory-limit", limit_units));
    }
    if (!f.memory_limit_per_rank.empty()) {
      ENGRAM_ASSIGN_OR_RETURN(h.memory_limit_bytes_per_rank,
                              parse_bytes(f.memory_limit_per_rank, "--memory-limit-per-rank", limit_units));
    }
    if (!f.shm_size_limit.empty()) {
      ENGRAM_ASSIGN_OR_RETURN(h.tmpfs_bytes_enforced,
                              parse_bytes(f.shm_size_limit, "--shm-size-limit", SizeUnits::kKubernetes));
    }
    if (!f.nvlink_domain.empty()) h.nvlink_domain = f.nvlink_domain;
    ENGRAM_RETURN_IF_ERROR(apply(f.imex_channel, h.imex_channel, bool_of("--imex-channel")));
    ENGRAM_RETURN_IF_ERROR(apply(f.fabric_attribute, h.fabric_attribute, bool_of("--fabric-attribute")));
  }
  // Said once, in both units, where a Kubernetes flag was written with a letter alone.
  if (!d.hosts.empty()) {
    const HostSpec& h = d.hosts.front();
    auto note = [&](const std::string& text, const char* flag, std::optional<uint64_t> bytes) {
      if (text.empty() || !bytes) return;
      if (auto reading = kubernetes_letter_reading(text, *bytes))
        d.defaults_used.push_back({flag, *reading, "read as Kubernetes reads its quantities; write Gi for powers of 1024"});
    };
    if (memory_limit_units(h.environment) == SizeUnits::kKubernetes) {
      note(f.memory_limit, "--memory-limit", h.memory_limit_bytes);
      note(f.memory_limit_per_rank, "--memory-limit-per-rank", h.memory_limit_bytes_per_rank);
    }
    note(f.shm_size_limit, "--shm-size-limit", h.tmpfs_bytes_enforced);
  }
  if (!f.rank_hosts.empty()) {
    d.rank_hosts.clear();
    size_t start = 0;
    while (start <= f.rank_hosts.size()) {
      size_t comma = f.rank_hosts.find(',', start);
      std::string item = f.rank_hosts.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      ENGRAM_ASSIGN_OR_RETURN(int h, whole_number_flag<int>("--rank-hosts", item, 0, kMaxHosts - 1));
      d.rank_hosts.push_back(h);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }

  ENGRAM_RETURN_IF_ERROR(apply(f.cpu_offload, d.config.cpu_offload, bool_of("--cpu-offload")));
  if (!f.cpu_offload.empty()) d.config.cpu_offload_given = true;
  ENGRAM_RETURN_IF_ERROR(apply(f.thp_packing, d.config.thp_packing, bool_of("--thp-packing")));
  ENGRAM_RETURN_IF_ERROR(
      apply(f.embedding_across_dp, d.config.embedding_across_dp, bool_of("--embedding-across-dp")));
  if (!f.host_layout.empty()) d.config.host_layout = f.host_layout;
  ENGRAM_RETURN_IF_ERROR(apply(f.peer_shards, d.config.peer_shards, bool_of("--peer-shards")));
  ENGRAM_RETURN_IF_ERROR(apply(f.sequence_parallel, d.config.sequence_parallel, bool_of("--sequence-parallel")));
  if (!f.dp_shared_memory.empty()) {
    if (f.dp_shared_memory == "unset") d.config.dp_shared_memory.reset();
    else if (f.dp_shared_memory == "true") d.config.dp_shared_memory = true;
    else if (f.dp_shared_memory == "false") d.config.dp_shared_memory = false;
    else
      return invalid_argument(fmt::format("--dp-shared-memory: '{}' is not allowed; write true, false or unset",
                                          excerpt(f.dp_shared_memory)));
  }
  if (!f.shard_group.empty()) {
    const std::optional<ShardGroup> kind = shard_group_from_name(f.shard_group);
    if (!kind)
      return invalid_argument(fmt::format("--shard-group: '{}' is not a shard group; write {}", excerpt(f.shard_group),
                                          shard_group_choices()));
    d.config.shard_group = *kind;
  }
  ENGRAM_RETURN_IF_ERROR(apply(f.tokens_per_rank, d.config.tokens_per_rank_max, int_of("--tokens-per-rank", 1, kMaxTokensPerRank)));
  if (!f.gpu_memory_fraction.empty()) {
    ENGRAM_ASSIGN_OR_RETURN(d.engine.gpu_memory_fraction,
                            parse_fraction(f.gpu_memory_fraction, "--gpu-memory-fraction"));
    d.engine.fraction_given = true;
  }
  if (!f.context_length.empty()) {
    ENGRAM_ASSIGN_OR_RETURN(int tokens, whole_number_flag<int>("--context-length", f.context_length, 1,
                                                               kMaxContextLength));
    d.engine.context_length_tokens = tokens;
  }
  ENGRAM_RETURN_IF_ERROR(apply(f.allow_negative_kv, d.engine.negative_kv_allowed, bool_of("--allow-negative-kv")));
  if (!f.gpu_reserved.empty()) {
    ENGRAM_ASSIGN_OR_RETURN(uint64_t bytes, parse_bytes(f.gpu_reserved, "--gpu-reserved"));
    d.engine.gpu_reserved_bytes = bytes;
  }
  return d;
}

// A report as stdout shows it: coloured on a terminal (not piped, NO_COLOR unset).
std::string for_terminal(const std::string& report) {
  return colour_wanted(STDOUT_FILENO) ? colour_report(report) : report;
}

// What was read from --from, before the plan: the engine, its settings as
// plan's flags, how each was read, and what was ignored.
std::string engine_command_line_text(const EngineCommandLine& line) {
  std::string settings;
  for (const auto& [flag, value] : line.plan_flags)
    if (flag != "engine") settings += fmt::format("{}--{} {}", settings.empty() ? "" : " ", flag, value);
  std::string out = fmt::format("from the {} command line: {}\n", line.engine, settings);
  for (const std::string& n : line.notes) out += fmt::format("  {}\n", n);
  if (!line.ignored.empty())
    out += fmt::format("  ignored (no bearing on Engram): {}\n", fmt::join(line.ignored, ", "));
  return out + "\n";
}

Json engine_command_line_json(const EngineCommandLine& line) {
  Json settings = Json::object();
  for (const auto& [flag, value] : line.plan_flags) settings[flag] = value;
  return Json{{"engine", line.engine}, {"plan_flags", settings}, {"notes", line.notes}, {"ignored", line.ignored}};
}

// --engine NAME[+VARIANT][,...] and --compare-engines: the engines (or
// their named variants) to plan under (none: the file's, else engramlab).
Result<std::vector<EngineChoice>> engines_asked(const PlanFlags& f) {
  std::vector<EngineChoice> out;
  if (f.compare_engines) {
    if (!f.engine.empty())
      return invalid_argument("--compare-engines: plans under every engine; give it or --engine NAME,..., not both");
    for (const EngineProfile& e : engine_registry()) out.push_back({e.id, ""});
    return out;
  }
  size_t start = 0;
  while (!f.engine.empty() && start <= f.engine.size()) {
    const size_t comma = std::min(f.engine.find(',', start), f.engine.size());
    ENGRAM_ASSIGN_OR_RETURN(EngineChoice choice, parse_engine_choice(f.engine.substr(start, comma - start), "--engine"));
    if (std::find(out.begin(), out.end(), choice) != out.end())
      return invalid_argument(fmt::format("--engine: '{}' is named twice; name each engine once",
                                          profile_label(engine_profile(choice.id, choice.variant))));
    out.push_back(std::move(choice));
    start = comma + 1;
  }
  return out;
}

// --tokens 1,64,1024,8192: the token counts of the step-time table (none:
// the deployment's tokens per rank).
Result<std::vector<int>> step_tokens(const PlanFlags& f, const Deployment& d) {
  std::vector<int> out;
  if (f.tokens.empty()) return std::vector<int>{d.config.tokens_per_rank_max};
  size_t start = 0;
  while (start <= f.tokens.size()) {
    const size_t comma = std::min(f.tokens.find(',', start), f.tokens.size());
    ENGRAM_ASSIGN_OR_RETURN(const int t, whole_number_flag<int>("--tokens", f.tokens.substr(start, comma - start), 1,
                                                                kMaxTokensPerRank));
    out.push_back(t);
    start = comma + 1;
  }
  return out;
}

// The step model's constants: the GPU model's built-in calibration, or the
// fit of --calibration FILE (which must be a run of that GPU model).
struct StepModel {
  StepConstants constants;
  std::optional<CalibrationFit> fit;
};
Result<StepModel> step_model(const PlanFlags& f, const Deployment& d) {
  const std::string gpu = step_gpu_model(d);
  StepModel m{step_constants_for(gpu), std::nullopt};
  if (f.calibration.empty()) return m;
  ENGRAM_ASSIGN_OR_RETURN(const CalibrationFile file, load_calibration(f.calibration));
  ENGRAM_RETURN_IF_ERROR(check_calibration_gpu(file, gpu));
  m.fit = fit_calibration(file, m.constants);
  m.constants = m.fit->constants;
  return m;
}

Json calibration_fit_json(const CalibrationFit& fit) {
  Json j;
  j["calibration"] = fit.constants.calibration;
  j["rms_log_error"] = fit.rms_log_error;
  Json constants;
  for (const StepConstantField& c : step_constant_fields()) constants[c.name] = fit.constants.*c.member;
  j["constants"] = std::move(constants);
  j["not_fitted"] = fit.not_fitted;
  j["points"] = Json::array();
  for (const PointFit& p : fit.points)
    j["points"].push_back({{"series", p.point.series}, {"tokens_per_rank", p.point.tokens}, {"ranks", p.point.ranks},
                           {"line", p.point.line}, {"measured_us_p50", p.point.p50_us},
                           {"model_us_p50", p.predicted_us}, {"ratio", p.ratio}});
  return j;
}

// --from: the engine's command line as plan's flags. A flag given to plan
// itself wins over the command line's (so a pasted line can be corrected
// without editing it); --file beside it is refused (two descriptions).
Result<EngineCommandLine> apply_engine_command_line(PlanFlags& f) {
  if (!f.file.empty())
    return invalid_argument("--from: describes the deployment as the engine's command line; give it or --file, not both");
  if (f.compare_engines && !f.engine.empty())
    return invalid_argument("--compare-engines: plans under every engine; give it or --engine NAME, not both");
  ENGRAM_ASSIGN_OR_RETURN(EngineCommandLine line, read_engine_command_line(f.from, f.engine));
  const std::map<std::string, std::string PlanFlags::*, std::less<>> fields = {
      {"engine", &PlanFlags::engine},
      {"tp", &PlanFlags::tp},
      {"dp", &PlanFlags::dp},
      {"ep", &PlanFlags::ep},
      {"hosts", &PlanFlags::hosts},
      {"gpus-per-host", &PlanFlags::gpus_per_host},
      {"extra-ranks", &PlanFlags::extra_ranks},
      {"prefill-cp", &PlanFlags::prefill_cp},
      {"enable-expert-parallel", &PlanFlags::enable_expert_parallel},
      {"model", &PlanFlags::model},
      {"context-length", &PlanFlags::context_length},
      {"gpu-memory-fraction", &PlanFlags::gpu_memory_fraction},
      {"cpu-offload", &PlanFlags::cpu_offload},
      {"dp-shared-memory", &PlanFlags::dp_shared_memory},
      {"peer-shards", &PlanFlags::peer_shards},
      {"thp-packing", &PlanFlags::thp_packing},
      {"embedding-across-dp", &PlanFlags::embedding_across_dp},
      {"sequence-parallel", &PlanFlags::sequence_parallel},
      {"host-layout", &PlanFlags::host_layout},
      {"shard-group", &PlanFlags::shard_group},
  };
  for (const auto& [flag, value] : line.plan_flags) {
    auto it = fields.find(flag);
    ENGRAM_CHECK_MSG(it != fields.end(), "every setting read from an engine's command line is a plan flag");
    if (flag == "engine" && f.compare_engines) continue;  // every engine's column
    std::string& field = f.*(it->second);
    if (field.empty()) field = value;
  }
  return line;
}

int run_plan(PlanFlags& flags) {
  auto fail = [&](const Status& s) {
    const int code = s.code() == ErrorCode::kInvalidArgument ? 2 : 1;
    std::cout.flush();
    std::fputs(fmt::format("engramlab plan: error: {}\n", say_fixes_once_in(s.to_string())).c_str(), stderr);
    if (flags.json) std::cout << dump_json(error_document("plan", s)) << "\n";
    return code;
  };
  std::optional<EngineCommandLine> from;
  if (!flags.from.empty()) {
    auto read = apply_engine_command_line(flags);
    if (!read.is_ok()) return fail(read.status());
    from = std::move(read).value();
    if (!flags.json && !flags.emit_deployment) std::cout << engine_command_line_text(*from);
  }
  auto deployment = build_deployment(flags);
  if (!deployment.is_ok()) return fail(deployment.status());
  const Result<std::vector<EngineChoice>> engines = engines_asked(flags);
  if (!engines.is_ok()) return fail(engines.status());
  if (engines->size() == 1) {
    deployment->engine.profile = engines->front().id;
    deployment->engine.variant = engines->front().variant;
  }
  if (flags.emit_deployment) {
    if (engines->size() > 1)
      return fail(invalid_argument("--emit-deployment: writes one engine's deployment; name one with --engine"));
#if ENGRAM_HAVE_EMULATOR
    std::cout << harness::deployment_file_yaml(deployment.value());
    return 0;
#else
    // The deployment writer lives with scenario emission, in the emulator's harness.
    return fail(failed_precondition(
        "--emit-deployment: this engramlab was built without the emulator (-DENGRAM_BUILD_EMULATOR=OFF); "
        "build with -DENGRAM_BUILD_EMULATOR=ON (needs Boost.Context) for it"));
#endif
  }
  const Result<std::vector<int>> tokens = step_tokens(flags, deployment.value());
  if (!tokens.is_ok()) return fail(tokens.status());
  if (!flags.sweep.empty()) {
    const Result<SweepSpec> spec = parse_sweep(flags.sweep, deployment.value());
    if (!spec.is_ok()) return fail(spec.status());
    return run_sweep(deployment.value(), spec.value(), flags.json, flags.sweep_svg);
  }
  if (!flags.sweep_svg.empty())
    return fail(invalid_argument(fmt::format("--sweep-svg '{}' plots a sweep: give --sweep KEY=V1,V2 ... too",
                                             excerpt(flags.sweep_svg, 200))));
  if (flags.calibration_check) {
    // A fresh bench run held to the shipped model's bounds: exit 1 where a point is outside.
    if (flags.calibration.empty())
      return fail(invalid_argument("--calibration-check: give --calibration FILE (a bench CSV) to check"));
    const std::string gpu = step_gpu_model(deployment.value());
    const Result<CalibrationFile> file = load_calibration(flags.calibration);
    if (!file.is_ok()) return fail(file.status());
    if (Status s = check_calibration_gpu(file.value(), gpu); !s.is_ok()) return fail(s);
    const StepConstants shipped = step_constants_for(gpu);
    int misses = 0;
    std::cout << format_calibration_check(judge_calibration(file.value(), shipped), shipped, misses);
    return misses == 0 ? 0 : 1;
  }
  const Result<StepModel> model = step_model(flags, deployment.value());
  if (!model.is_ok()) return fail(model.status());
  if (engines->size() > 1) {
    // A column per engine; an engine's refusal is its column, not the exit code.
    const std::vector<EngineColumn> columns = compare_engines(deployment.value(), engines.value());
    if (flags.json) {
      Json j = engine_comparison_json(columns);
      if (from) j["from_command_line"] = engine_command_line_json(*from);
      std::cout << dump_json(j) << "\n";
    }
    else std::cout << for_terminal(format_engine_comparison(columns));
    return 0;
  }
  WarningSink sink;  // the report prints the warnings; no second copy on stderr
  auto checked = plan_with_memory_fit(deployment.value(), sink);
  if (!checked.is_ok()) return fail(checked.status());
  // The report first, so the figures behind a "cannot run" are on screen.
  const Status& fits = checked->fits;
  if (flags.json) {
    Json j = plan_document(checked.value(), model->constants, tokens.value(),
                           model->fit ? calibration_fit_json(*model->fit) : Json(nullptr));
    if (from) j["from_command_line"] = engine_command_line_json(*from);
    std::cout << dump_json(j) << "\n";
  } else {
    std::cout << for_terminal(format_plan_report(checked->plan));
    if (flags.explain) std::cout << format_decided_by(checked->plan.decided_by);
    if (model->fit) std::cout << "\n" << format_calibration_fit(*model->fit);
    std::cout << "\n" << format_step_times(plan_step_times(checked->plan, model->constants, tokens.value()));
  }
  if (!fits.is_ok()) {
    std::cout.flush();  // the report before the error, also where both go to one pipe
    std::fputs(fmt::format("engramlab plan: error: {}\n", say_fixes_once_in(fits.to_string())).c_str(), stderr);
    return 1;
  }
  return 0;
}

CommandRegistration plan_registration("20-plan", [](CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Resolve the Engram config, decide each rank's placement and show the memory it costs");
  PlanFlags& f = *flags;
  cmd->footer(std::string(kSizeUnitsHelp));
  cmd->add_option("--file", f.file, "deployment YAML (flags override its fields)");
  cmd->add_option("--model", f.model,
                  "a model shipped in models/ (deepseek-v4.1-flash, the default; deepseek-v4.1-flash-layer1; "
                  "tiny; ...), or the path of a model file (.yaml)");
  cmd->add_option("--hosts", f.hosts, "number of hosts (default 1; replaces the file's host list)");
  cmd->add_option("--gpus-per-host", f.gpus_per_host, "GPUs per host (default: tp * dp / hosts)");
  cmd->add_option("--gpu-model", f.gpu_model,
                  "H20, H100, H200 (default), B200, GB200, B300, GB300 (any case), or the path of a GPU file");
  cmd->add_option("--gpu-memory", f.gpu_memory,
                  "GPU memory as CUDA reports it, e.g. 139.8GiB (default: the model's CUDA total, announced)");
  cmd->add_option("--host-memory", f.host_memory,
                  "system RAM per host, e.g. 2TB (default: the model's usual host, announced)");
  cmd->add_option(kGpuMemoryFractionSpelling.names, f.gpu_memory_fraction,
                  spelled("the engine's share of GPU memory (default 0.90)", kGpuMemoryFractionSpelling));
  cmd->add_option("--gpu-reserved", f.gpu_reserved,
                  "GPU memory per GPU the engine needs besides Engram and the KV cache: weights, activations, "
                  "CUDA context, NCCL (default: the model file's weights at this TP, else not counted)");
  cmd->add_option("--context-length", f.context_length,
                  "tokens per request, for the maximum concurrency the KV cache left holds (vLLM max_model_len)");
  cmd->add_flag("--allow-negative-kv{true}", f.allow_negative_kv,
                "accept nothing left for the KV cache (a warning then, not an error: exit 0), e.g. where the engine's "
                "KV budget is set elsewhere");
  cmd->add_option("--environment", f.environment,
                  "where the ranks run: bare_metal, docker, kubernetes (default unknown: warnings name every fix)");
  cmd->add_option("--shm-size", f.shm_size, "/dev/shm tmpfs total, e.g. 190GiB (default 64MiB, Docker's)");
  cmd->add_flag("--no-shm{true}", f.no_shm, "/dev/shm is not mounted");
  cmd->add_option("--memory-limit", f.memory_limit,
                  "each host's container or pod memory limit over all its ranks, e.g. 200GiB (docker --memory, a "
                  "pod's resources.limits.memory): their host tables, the /dev/shm copy they write, pinned staging; with "
                  "--environment kubernetes a Kubernetes quantity (200G = 200 x 10^9, 200Gi = 200 x 2^30)");
  cmd->add_option("--memory-limit-per-rank", f.memory_limit_per_rank,
                  "each rank's own memory limit (a container or cgroup per rank), e.g. 64GiB");
  cmd->add_option("--shm-size-limit", f.shm_size_limit,
                  "what /dev/shm lets be written below the total it shows: a Kubernetes emptyDir sizeLimit, read as "
                  "a Kubernetes quantity (189Gi = 189 x 2^30, 189G = 189 x 10^9)");
  cmd->add_option("--nvlink-domain", f.nvlink_domain, "NVLink domain name shared by the hosts");
  cmd->add_flag("--imex-channel{true}", f.imex_channel, "an IMEX channel device exists");
  cmd->add_flag("--fabric-attribute{true}", f.fabric_attribute, "the driver reports FABRIC handle support");
  cmd->add_option("--rank-hosts", f.rank_hosts, "rank -> host index map, comma separated (default: fill in order)");
  cmd->add_option(kTpSpelling.names, f.tp, spelled("attention TP ranks per replica", kTpSpelling));
  cmd->add_option(kDpSpelling.names, f.dp, spelled("DP replicas", kDpSpelling));
  cmd->add_option(kEpSpelling.names, f.ep, spelled("expert parallel size", kEpSpelling));
  cmd->add_flag("--enable-expert-parallel{true}", f.enable_expert_parallel,
                "vLLM's switch: expert parallel over every rank, ep = tp x dp (not with --ep)");
  cmd->add_option("--prefill-cp", f.prefill_cp, "prefill context parallel size");
  cmd->add_flag("--elastic-ep{true}", f.elastic_ep, "elastic expert parallelism is on");
  cmd->add_flag("--cpu-offload{true}", f.cpu_offload, "Engram tables offloaded to host memory");
  cmd->add_flag("--peer-shards{true}", f.peer_shards, "opt in to device_peer row shards");
  cmd->add_flag("--sequence-parallel{true}", f.sequence_parallel,
                "each TP rank gets back its own token shard (needs tp > 1)");
  cmd->add_option("--dp-shared-memory", f.dp_shared_memory, "true | false | unset (default unset)");
  cmd->add_option("--shard-group", f.shard_group,
                  fmt::format("device row-shard group: {} (default {})", shard_group_choices(),
                              shard_group_name(ShardGroup::kWorld)));
  cmd->add_option("--tokens-per-rank", f.tokens_per_rank, "DP slot size for the collective buffer (default 1024)");
  cmd->add_option("--engine", f.engine,
                  fmt::format("whose rules to plan by: {}, or a named variant ENGINE+VARIANT (`engramlab engines "
                              "show ENGINE` lists them) (default engramlab, or the file's engine.name); several, "
                              "comma separated, compare them in one table",
                              engine_names_text()));
  cmd->add_flag("--compare-engines", f.compare_engines, "plan under every engine, a column each");
  cmd->add_flag("--explain", f.explain,
                "after the plan, each decision and the rule of the engine that made it, with its source (in --json: "
                "decided_by, always)");
  cmd->add_option("--tokens", f.tokens,
                  "token counts per rank of the step-time table, comma separated, e.g. 1,64,1024,8192 (default: "
                  "--tokens-per-rank)");
  cmd->add_option("--sweep", f.sweep,
                  "plan every combination of KEY=V1,V2 words (tp, dp, tokens, shm, placement=all|NAME,...), a row each: "
                  "what the engine builds (*), the verdict, KV left, host tables per node, step time per token count");
  cmd->add_option("--sweep-svg", f.sweep_svg,
                  "with --sweep: write the frontier as an SVG to FILE (step time at the first token count vs KV cache "
                  "left, area the host tables per node, the engine's own choice ringed, refused ones counted by reason)");
  cmd->add_flag("--calibration-check", f.calibration_check,
                "with --calibration FILE: hold every point of FILE to the built-in model (1.25x device, 1.5x host); "
                "exit 1 where one is outside");
  cmd->add_option("--calibration", f.calibration,
                  "a bench CSV of the deployment's GPU model (engramlab bench --csv): fit the step model on it, print "
                  "the fit's error per series and size, and time the plan with it (default: the built-in calibration, "
                  "docs/calibration_1xh200.csv for H200)");
  cmd->add_option("--from", f.from,
                  "the engine's own command line, quoted as pasted: \"vllm serve MODEL -tp 1 -dp 8 ...\" or "
                  "\"python -m sglang.launch_server --model-path MODEL --tp 8 ...\" (its Engram settings are read, "
                  "other flags listed as ignored; plan's own flags override it)");
  cmd->add_flag("--emit-deployment", f.emit_deployment,
                "print the deployment (from flags, --file or --from) as a deployment file instead of planning it");
  std::string layouts;
  for (const EngineProfile& e : engine_registry()) {
    layouts += fmt::format("{}{}:", layouts.empty() ? "" : "; ", e.name);
    for (const HostLayoutOption& l : e.host_layouts) layouts += fmt::format(" {}", l.name);
  }
  cmd->add_option("--host-layout", f.host_layout,
                  fmt::format("the engine's host layout by its own name ({}; default the first)", layouts));
  cmd->add_flag("--thp-packing{true}", f.thp_packing, "vLLM: pack host tables in huge pages (needs cpu_offload)");
  cmd->add_flag("--embedding-across-dp{true}", f.embedding_across_dp,
                "vLLM: shard device tables' heads over TP x DP");
  cmd->add_option("--extra-ranks", f.extra_ranks,
                  "ranks the engine's world holds beyond tp x dp (vLLM sizes its Engram DP group over them)");
  cmd->add_flag("--json", f.json, "print a machine-readable JSON object");
  cmd->callback([flags, cmd, &exit_code]() {
    for (const CLI::Option* opt : cmd->get_options()) {
      const auto& given = opt->results();
      if (opt->count() > 0 && !given.empty() &&
          std::all_of(given.begin(), given.end(), [](const std::string& v) { return v.empty(); })) {
        flags->given_empty = opt->get_name();
        break;
      }
    }
    exit_code = run_plan(*flags);
  });
});

}  // namespace
}  // namespace engram::app
