// `engramlab acceptance`: the engines' manual acceptance test as one command,
// run by every process of a job (one per GPU) under `engramlab launch -n N`,
// torchrun or srun:
//
//   engramlab launch -n 2 -- engramlab acceptance --peer-shards
//
// Each rank builds its tables through the runtime (the real model's size
// unless --table-model says otherwise), looks up ids on its GPU eagerly and
// under graph replay, checks sampled slots against the CPU reference, checks
// device_peer against the collective over the same shards on every slot,
// and prints its latency p10/p50/p90 per table and token count
// (operator_checks/acceptance_rank.h); then its decode loop: requests served
// step by step with ids hashed on the GPU and looked up in one captured
// graph replayed across steps, checked against the CPU request hasher and
// the CPU reference (operator_checks/acceptance_decode_loop.h). Exit codes:
// 0 every check held; 1 a mismatch or a failed step; 2 bad flags or no
// launcher environment.
//
// With --file deployment.yaml the file gives the model, layout and config,
// each rank compares its host with the file's entry before anything is
// built and the placement and handle type the runtime chose with `plan` of
// the file after it started (apps/deployment_bridge.h): any difference is
// exit 1, naming both values. --json: one document per rank.
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "apps/command_registry.h"
#include "apps/deployment_bridge.h"
#include "apps/flag_numbers.h"
#include "apps/launched_rank.h"
#include "backends/ipc/launch_env.h"
#include "core/base/size_text.h"
#include "core/base/text_excerpt.h"
#include "core/base/json_output.h"
#include "core/deployment/deployment.h"
#include "core/plan/planned_rank.h"
#include "operator_checks/acceptance_rank.h"

namespace engram::app {

// The command is the front of these checks (operator_checks/).
using namespace engram::operator_checks;
namespace {

struct AcceptanceFlags {
  LaunchedRankFlags rank{"0", "1"};
  bool cpu_offload = false;
  bool peer_shards = false;
  std::string dp_shared_memory;  // "", "true", "false"
  // Whole numbers are read from the text as typed (apps/flag_numbers.h).
  std::string tokens = "1,64,1024,8192";
  std::string samples_text = "256";
  std::string replays_text = "50";
  std::string decode_steps_text = "16";
  // The bridge (apps/deployment_bridge.h) and one JSON document per rank.
  BridgeFlags bridge;
  bool json = false;
};

Result<operator_checks::AcceptanceOptions> options_from(const AcceptanceFlags& f, const ipc::LaunchEnv& env) {
  operator_checks::AcceptanceOptions o;
  ENGRAM_ASSIGN_OR_RETURN(o.token_counts, whole_number_list_flag<int>("--tokens", f.tokens, 1, kMaxTokensPerRank));
  ENGRAM_ASSIGN_OR_RETURN(o.sampled_slots, whole_number_flag<int>("--samples", f.samples_text, 0, 1 << 20));
  ENGRAM_ASSIGN_OR_RETURN(o.timed_replays, whole_number_flag<int>("--replays", f.replays_text, 1, 100000));
  ENGRAM_ASSIGN_OR_RETURN(o.decode_steps, whole_number_flag<int>("--decode-steps", f.decode_steps_text, 0, 100000));
  ENGRAM_ASSIGN_OR_RETURN(o.runtime, runtime_options_from(f.rank, env));
  o.runtime.config.cpu_offload = f.cpu_offload;
  o.runtime.config.cpu_offload_given = true;  // off unless --cpu-offload, whatever the engine's default
  o.runtime.config.peer_shards = f.peer_shards;
  if (f.dp_shared_memory == "true") o.runtime.config.dp_shared_memory = true;
  else if (f.dp_shared_memory == "false") o.runtime.config.dp_shared_memory = false;
  else if (!f.dp_shared_memory.empty())
    return invalid_argument(fmt::format("--dp-shared-memory: '{}' is not true or false; leave it out for the default",
                                        excerpt(f.dp_shared_memory)));
  return o;
}

// The flags a deployment file gives instead (--file).
constexpr FlagTheFileGives kAcceptanceGivenByTheFile[] = {
    {"--model", "model"},          {"--tp", "layout.tp"},
    {"--dp", "layout.dp"},         {"--shard-group", "config.shard_group"},
    {"--cpu-offload", "config.cpu_offload"}, {"--peer-shards", "config.peer_shards"},
    {"--dp-shared-memory", "config.dp_shared_memory"}, {"--ranks-per-gpu", "hosts[].ranks_per_gpu"},
    {"--placement", "config.placement"},
    {"--engine", "engine.name"},
};

// One rank's run and everything its report and document need.
struct AcceptanceRun {
  std::optional<ipc::LaunchEnv> env;
  std::optional<DeploymentBridge> bridge;
  std::optional<FileCheck> check;
  std::vector<std::string> choice_differences;  // the runtime's choice against the plan of the file
  operator_checks::AcceptanceReport report;
  WarningSink sink;
  bool started = false;  // the report holds the runtime's choice
  Status error;
  int exit_code = 0;
};

Json acceptance_json(const AcceptanceRun& run) {
  Json j = json_document("acceptance");
  const operator_checks::AcceptanceReport& r = run.report;
  j["rank"] = run.env ? Json(run.env->rank) : Json(nullptr);
  j["world_size"] = run.env ? Json(run.env->world_size) : Json(nullptr);
  j["placement"] = run.started ? Json(placement_name(r.placement)) : Json(nullptr);
  j["handle_type"] = run.started && r.handle_type ? Json(handle_type_name(*r.handle_type)) : Json(nullptr);
  j["build_seconds"] = run.started ? Json(r.build_seconds) : Json(nullptr);
  j["host_fill_seconds"] = run.started ? Json(r.host_fill_seconds) : Json(nullptr);
  j["device_register_seconds"] = run.started ? Json(r.device_register_seconds) : Json(nullptr);
  j["device_bytes"] = run.started ? Json(r.device_bytes) : Json(nullptr);
  j["passed"] = run.exit_code == 0;
  j["rows"] = Json::array();
  for (const AcceptanceRow& row : r.rows) {
    j["rows"].push_back({{"table_index", row.table_index},
                         {"layer_id", row.layer_id},
                         {"tokens", row.tokens},
                         {"slots", row.slots},
                         {"slots_checked", row.slots_checked},
                         {"cross_checked", row.cross_checked},
                         {"latency_us_p10", row.latency_us_p10},
                         {"latency_us_p50", row.latency_us_p50},
                         {"latency_us_p90", row.latency_us_p90},
                         {"mismatches", row.mismatches}});
  }
  const operator_checks::DecodeLoopReport& d = r.decode;
  j["decode_loop"] = d.ran ? Json{{"steps", d.steps},
                                  {"requests", d.requests},
                                  {"tables", d.tables},
                                  {"request_tokens", d.request_tokens},
                                  {"ids_checked", d.ids_checked},
                                  {"slots_checked", d.slots_checked},
                                  {"latency_us_p50", d.latency_us_p50},
                                  {"mismatches", d.mismatches}}
                           : Json(nullptr);
  j["file_check"] = file_check_json(run.bridge ? &*run.bridge : nullptr, run.check ? &*run.check : nullptr,
                                    run.choice_differences);
  j["warnings"] = warnings_json(run.sink.warnings());
  j["error"] = error_json_or_null(run.error);
  return j;
}

// Bad input: exit 2, the error on stderr (and as the document).
void refuse(AcceptanceRun& run, Status status, const std::string& hint = "") {
  std::fprintf(stderr, "engramlab acceptance: %s%s\n", status.to_string().c_str(), hint.c_str());
  run.error = std::move(status);
  run.exit_code = 2;
}

void run_acceptance(const AcceptanceFlags& flags, const CLI::App& cmd, AcceptanceRun& run) {
  auto env = ipc::read_launch_env(ipc::process_env());
  if (!env.is_ok())
    return refuse(run, env.status(),
                  "\n  run it under a launcher, one process per GPU, e.g. `engramlab launch -n 2 -- engramlab "
                  "acceptance`");
  run.env = *env;
  auto bridge = load_bridge(flags.bridge);
  if (!bridge.is_ok()) return refuse(run, bridge.status());
  run.bridge = std::move(bridge).value();
  if (run.bridge) {
    if (Status s = refuse_flags_beside_file(cmd, kAcceptanceGivenByTheFile); !s.is_ok()) return refuse(run, s);
  }
  auto options = options_from(flags, *env);
  if (!options.is_ok()) return refuse(run, options.status());
  auto ranks_per_gpu = ranks_per_gpu_from(flags.rank);
  if (!ranks_per_gpu.is_ok()) return refuse(run, ranks_per_gpu.status());

  // The bridge, before anything is built: this host against the file.
  std::optional<PlanResult> plan;
  if (run.bridge) {
    auto from_file = runtime_options_from_file(*run.bridge, flags.rank, *env);
    if (!from_file.is_ok()) return refuse(run, from_file.status());
    options->runtime = std::move(from_file).value();
    auto planned = plan_of_file(*run.bridge);
    if (!planned.is_ok()) {
      if (planned.status().code() == ErrorCode::kInvalidArgument) return refuse(run, planned.status());
      std::fprintf(stderr, "rank %d: FAILED: %s\n", env->rank, planned.status().to_string().c_str());
      run.error = planned.status();
      run.exit_code = 1;
      return;
    }
    plan = std::move(planned).value();
    auto observe = launched_rank_observe_options(*env);
    if (!observe.is_ok()) return refuse(run, observe.status());
    run.check = check_against_file(*run.bridge, env->rank, env->world_size, true, observe_this_host(*observe));
    print_file_check(stderr, fmt::format("rank {}: ", env->rank), *run.bridge, *run.check);
    ranks_per_gpu = ranks_per_gpu_from_file(*run.bridge, *run.check);
  }

  const Status status = run_launched_rank(*env, ranks_per_gpu.value(), run.sink, [&](RankBackend& backend) {
    if (run.check)
      ENGRAM_RETURN_IF_ERROR(agree_on_file_check(*backend.world, *run.check, run.bridge->file.source));
    const Status ran = operator_checks::run_acceptance_rank(backend, *options, run.sink, run.report);
    run.started = run.report.build_seconds > 0;  // set the moment the runtime started
    return ran;
  });
  for (const Warning& w : run.sink.warnings()) std::fprintf(stderr, "rank %d: warning: %s\n", env->rank, w.text.c_str());
  std::FILE* rows_to = flags.json ? stderr : stdout;
  for (const AcceptanceRow& row : run.report.rows)
    std::fprintf(rows_to, "%s\n", format_acceptance_row(run.report, row).c_str());
  if (run.report.decode.ran)
    std::fprintf(rows_to, "%s\n", format_decode_loop(env->rank, run.report.placement, run.report.decode).c_str());
  if (!status.is_ok()) {
    std::fprintf(stderr, "rank %d: FAILED: %s\n", env->rank, status.to_string().c_str());
    run.error = status;
    run.exit_code = 1;
    return;
  }
  // The bridge, after the runtime started: its choice against the plan of the file.
  if (plan) {
    run.choice_differences = runtime_choice_differences(*plan, run.bridge->file.source, env->rank,
                                                        run.report.placement, run.report.handle_type, "");
    for (const std::string& line : run.choice_differences)
      std::fprintf(stderr, "rank %d: differs from %s: %s\n", env->rank, run.bridge->file.source.c_str(), line.c_str());
  }
  const bool passed = run.report.passed() && run.choice_differences.empty();
  // Host tables: the fill and the registration within the build.
  const std::string host_phases =
      run.report.host_fill_seconds > 0 || run.report.device_register_seconds > 0
          ? fmt::format(" (host rows reserved and filled in {:.1f} s, registered with the device in {:.1f} s)",
                        run.report.host_fill_seconds, run.report.device_register_seconds)
          : std::string();
  std::fprintf(rows_to, "rank %d: %s: %s, tables built in %.1f s%s, %s of device memory%s%s\n", env->rank,
               passed ? "PASS" : "FAIL", placement_name(run.report.placement), run.report.build_seconds,
               host_phases.c_str(), format_size_short(run.report.device_bytes).c_str(),
               run.report.handle_type ? ", handle type " : "",
               run.report.handle_type ? handle_type_name(*run.report.handle_type) : "");
  if (!run.choice_differences.empty())
    run.error = failed_precondition(fmt::format("the runtime's choice differs from the plan of {}",
                                                run.bridge->file.source));
  run.exit_code = passed ? 0 : 1;
}

CommandRegistration acceptance_registration("57-acceptance", [](CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<AcceptanceFlags>();
  CLI::App* cmd = app.add_subcommand(
      "acceptance",
      "One rank of the acceptance test, under a launcher (engramlab launch -n N, torchrun, srun; one process per "
      "GPU): tables built through the runtime, GPU lookups eager and under graph replay checked against the CPU "
      "reference (and device_peer against device_collective on every slot), latency p10/p50/p90");
  add_launched_rank_flags(*cmd, flags->rank);
  cmd->add_flag("--cpu-offload", flags->cpu_offload, "tables in host memory (host_shared, host_head_sharded, host_private)");
  cmd->add_flag("--peer-shards", flags->peer_shards, "device_peer: peers map each other's row shards");
  cmd->add_option("--dp-shared-memory", flags->dp_shared_memory, "true or false (default: the rule's choice)");
  cmd->add_option("--tokens", flags->tokens, "token counts per rank (default 1,64,1024,8192)");
  cmd->add_option("--samples", flags->samples_text, "slots per table and token count checked on the CPU (default 256)");
  cmd->add_option("--replays", flags->replays_text, "timed graph replays (default 50)");
  cmd->add_option("--decode-steps", flags->decode_steps_text,
                  "steps of the decode loop: ids hashed on the GPU and looked up in one replayed graph, checked "
                  "against the CPU hasher and reference (default 16; 0: none)");
  add_bridge_flags(*cmd, flags->bridge, "the model, layout and config the ranks run");
  cmd->add_flag("--json", flags->json, "print one JSON document per rank (the rows go to stderr)");
  cmd->callback([flags, cmd, &exit_code]() {
    AcceptanceRun run;
    run_acceptance(*flags, *cmd, run);
    if (flags->json) std::printf("%s\n", dump_json(acceptance_json(run)).c_str());
    std::fflush(stdout);
    exit_code = run.exit_code;
  });
});

}  // namespace
}  // namespace engram::app
