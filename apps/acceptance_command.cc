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
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "apps/command_registry.h"
#include "apps/flag_numbers.h"
#include "apps/launched_rank.h"
#include "backends/ipc/launch_env.h"
#include "core/base/size_text.h"
#include "core/base/text_excerpt.h"
#include "core/deployment/deployment.h"
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
};

Result<operator_checks::AcceptanceOptions> options_from(const AcceptanceFlags& f, const ipc::LaunchEnv& env) {
  operator_checks::AcceptanceOptions o;
  ENGRAM_ASSIGN_OR_RETURN(o.token_counts, whole_number_list_flag<int>("--tokens", f.tokens, 1, kMaxTokensPerRank));
  ENGRAM_ASSIGN_OR_RETURN(o.sampled_slots, whole_number_flag<int>("--samples", f.samples_text, 0, 1 << 20));
  ENGRAM_ASSIGN_OR_RETURN(o.timed_replays, whole_number_flag<int>("--replays", f.replays_text, 1, 100000));
  ENGRAM_ASSIGN_OR_RETURN(o.decode_steps, whole_number_flag<int>("--decode-steps", f.decode_steps_text, 0, 100000));
  ENGRAM_ASSIGN_OR_RETURN(o.runtime, runtime_options_from(f.rank, env));
  o.runtime.config.cpu_offload = f.cpu_offload;
  o.runtime.config.peer_shards = f.peer_shards;
  if (f.dp_shared_memory == "true") o.runtime.config.dp_shared_memory = true;
  else if (f.dp_shared_memory == "false") o.runtime.config.dp_shared_memory = false;
  else if (!f.dp_shared_memory.empty())
    return invalid_argument(fmt::format("--dp-shared-memory: '{}' is not true or false; leave it out for the default",
                                        excerpt(f.dp_shared_memory)));
  return o;
}

int run_acceptance(const AcceptanceFlags& flags) {
  auto env = ipc::read_launch_env(ipc::process_env());
  if (!env.is_ok()) {
    std::fprintf(stderr,
                 "engramlab acceptance: %s\n  run it under a launcher, one process per GPU, e.g. "
                 "`engramlab launch -n 2 -- engramlab acceptance`\n",
                 env.status().to_string().c_str());
    return 2;
  }
  auto options = options_from(flags, *env);
  if (!options.is_ok()) {
    std::fprintf(stderr, "engramlab acceptance: %s\n", options.status().to_string().c_str());
    return 2;
  }
  auto ranks_per_gpu = ranks_per_gpu_from(flags.rank);
  if (!ranks_per_gpu.is_ok()) {
    std::fprintf(stderr, "engramlab acceptance: %s\n", ranks_per_gpu.status().to_string().c_str());
    return 2;
  }
  WarningSink sink;
  operator_checks::AcceptanceReport report;
  const Status status = run_launched_rank(*env, ranks_per_gpu.value(), sink, [&](RankBackend& backend) {
    return operator_checks::run_acceptance_rank(backend, *options, sink, report);
  });
  for (const Warning& w : sink.warnings()) std::fprintf(stderr, "rank %d: warning: %s\n", env->rank, w.text.c_str());
  for (const AcceptanceRow& row : report.rows) std::printf("%s\n", format_acceptance_row(report, row).c_str());
  if (report.decode.ran)
    std::printf("%s\n", format_decode_loop(env->rank, report.placement, report.decode).c_str());
  if (!status.is_ok()) {
    std::fprintf(stderr, "rank %d: FAILED: %s\n", env->rank, status.to_string().c_str());
    return 1;
  }
  const bool passed = report.passed();
  std::printf("rank %d: %s: %s, tables built in %.1f s, %s of device memory%s%s\n", env->rank,
              passed ? "PASS" : "FAIL", placement_name(report.placement), report.build_seconds,
              format_size_short(report.device_bytes).c_str(), report.handle_type ? ", handle type " : "",
              report.handle_type ? handle_type_name(*report.handle_type) : "");
  std::fflush(stdout);
  return passed ? 0 : 1;
}

CommandRegistration reg("57-acceptance", [](CLI::App& app, int& exit_code) {
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
  cmd->callback([flags, &exit_code]() { exit_code = run_acceptance(*flags); });
});

}  // namespace
}  // namespace engram::app
