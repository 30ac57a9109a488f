// `engramlab doctor`: a preflight of this machine for the Engram placements.
// Reports the GPUs and their VMM handle types, the real FABRIC probe (the
// attribute alone lies without an IMEX channel), IMEX channels, P2P between
// every GPU pair, /dev/shm, the host identity, and what each placement would
// do here and why. Runs without GPUs or CUDA support too, and says so.
// Exit code 0: it is a report; a missing capability is a finding, not a failure.
// The bridge: --file compares this host with a deployment file's entry (exit
// 1 on any difference), --emit-host prints that entry, and under a launcher
// rank 0 prints every host (apps/doctor_cluster.h).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "apps/command_registry.h"
#include "apps/deployment_bridge.h"
#include "apps/doctor_cluster.h"
#include "apps/observed_host_here.h"
#include "apps/flag_numbers.h"
#include "apps/flag_spellings.h"
#include "core/base/text_excerpt.h"
#include "backends/ipc/imex_channels.h"
#include "core/base/json_output.h"
#include "core/deployment/deployment.h"
#include "core/lookup/tp_heads.h"
#include "core/model/table_spec.h"
#include "core/placements/placement.h"
#include "core/plan/shm_fix.h"
#include "core/base/units.h"

namespace engram::app {
namespace {

using ipc::kImexChannelDir;

// The doctor reads the host as the backends read it for a real run
// (apps/observed_host_here.h), so it cannot judge a machine the runtime sees
// otherwise: a /dev/shm that is a disk directory is no tmpfs here either.
using Facts = ObservedHost;

// "GPU 0: NVIDIA H200, 139.80 GiB total, ... granularity 2 MiB", or why it could not be read.
std::string gpu_line(const ObservedGpu& gpu) {
  if (!gpu.error.empty()) return fmt::format("GPU {}: {}", gpu.ordinal, gpu.error);
  return fmt::format("GPU {}: {}, {} total, {} free; VMM {}, POSIX fd {}, FABRIC attribute {}, granularity {}",
                     gpu.ordinal, gpu.device_name, format_gib(gpu.memory_bytes_total),
                     format_gib(gpu.memory_bytes_free), gpu.vmm ? "yes" : "no", gpu.posix_fd ? "yes" : "no",
                     gpu.fabric_attribute ? "yes" : "no", format_bytes(gpu.granularity_bytes));
}

// The FABRIC probe's outcome as the report words it.
std::string fabric_probe_text(const ObservedGpu& gpu) {
  if (gpu.fabric_works) return "works";
  return gpu.error.empty() ? gpu.fabric_error : gpu.error;
}

// The host tables' sizes the verdicts quote: the whole tables (one copy per
// node or replica) and, at --tp, the largest TP slice a rank holds or maps.
struct HostTableSizes {
  uint64_t tables_bytes = 0;
  int tp = 1;
  uint64_t tp_slice_bytes_max = 0;
};

HostTableSizes host_table_sizes(const ModelSpec& spec, int tp) {
  HostTableSizes sizes{spec.table_bytes_total(), tp, 0};
  for (int t = 0; t < tp; ++t) sizes.tp_slice_bytes_max = std::max(sizes.tp_slice_bytes_max, tp_slice_host_bytes(spec, tp, t));
  return sizes;
}

// What each placement would do on this machine: {placement, verdict}.
struct PlacementVerdict {
  std::string placement;
  std::string verdict;
};

// The machine as the placements' verdicts read it.
DoctorFacts doctor_facts(const Facts& f, const HostTableSizes& sizes) {
  DoctorFacts d;
  d.have_gpus = !f.gpus.empty();
  // The same conditions as the handle exchange's choice (choose_handle_type):
  // FABRIC needs the probe, an IMEX channel and one non-empty NVLink domain.
  d.all_fabric = d.have_gpus;
  d.all_posix_fd = d.have_gpus;
  d.all_vmm = d.have_gpus;
  for (const auto& gpu : f.gpus) {
    d.all_fabric = d.all_fabric && gpu.fabric_works;
    d.all_posix_fd = d.all_posix_fd && gpu.posix_fd;
    d.all_vmm = d.all_vmm && gpu.vmm;
    if (!gpu.fabric_works && d.fabric_why.empty())
      d.fabric_why = fmt::format("the FABRIC probe failed on GPU {}: {}", gpu.ordinal, fabric_probe_text(gpu));
  }
  if (d.fabric_why.empty() && d.have_gpus) {
    for (const auto& gpu : f.gpus) {
      if (gpu.nvlink_domain.empty()) {
        d.fabric_why = fmt::format("GPU {} has no NVLink domain: {}", gpu.ordinal, gpu.nvlink_domain_reason);
        break;
      }
      if (gpu.nvlink_domain != f.gpus.front().nvlink_domain) {
        d.fabric_why =
            fmt::format("GPUs {} and {} are in different NVLink domains", f.gpus.front().ordinal, gpu.ordinal);
        break;
      }
    }
  }
  if (d.fabric_why.empty() && d.have_gpus && f.imex_channels.empty())
    d.fabric_why = fmt::format("no IMEX channel in {}", kImexChannelDir);
  d.all_fabric = d.all_fabric && d.fabric_why.empty();
  if (d.have_gpus) d.nvlink_domain = f.gpus.front().nvlink_domain;
  d.p2p_all = f.p2p_all;
  d.shm_mounted = f.shm_mounted;
  d.shm_total_bytes = f.shm_total_bytes;
  d.shm_free_bytes = f.shm_free_bytes;
  d.shm_fix = shm_fix_text(sizes.tables_bytes, f.environment);
  d.tables_bytes = sizes.tables_bytes;
  d.tp = sizes.tp;
  d.tp_slice_bytes_max = sizes.tp_slice_bytes_max;
  return d;
}

// Every registered placement's verdict, in its doctor position.
std::vector<PlacementVerdict> judge_placements(const Facts& f, const HostTableSizes& sizes) {
  const DoctorFacts facts = doctor_facts(f, sizes);
  std::vector<const PlacementOps*> listed;
  for (const PlacementOps& ops : placement_registry()) listed.push_back(&ops);
  std::sort(listed.begin(), listed.end(),
            [](const PlacementOps* a, const PlacementOps* b) { return a->doctor_position < b->doctor_position; });
  std::vector<PlacementVerdict> out;
  for (const PlacementOps* ops : listed) out.push_back({ops->name, ops->doctor_verdict(facts)});
  return out;
}

void report(const Facts& f, const std::string& model_name, const HostTableSizes& sizes) {
  fmt::print("engramlab doctor\n\n");
  fmt::print("host: {} (boot id {}; {})\n", f.hostname, f.boot_id, runtime_environment_name(f.environment));
  if (f.shm_mounted) {
    fmt::print("/dev/shm: {} total, {} free\n", format_gib(f.shm_total_bytes), format_gib(f.shm_free_bytes));
  } else if (!f.shm_not_tmpfs.empty()) {
    fmt::print("/dev/shm: not a tmpfs: {}\n", f.shm_not_tmpfs);
  } else {
    fmt::print("/dev/shm: not mounted\n");
  }
  if (f.imex_channels.empty()) {
    fmt::print("IMEX channels: none ({} absent or without channel* entries)\n", kImexChannelDir);
  } else {
    fmt::print("IMEX channels: {} in {}\n", fmt::join(f.imex_channels, ", "), kImexChannelDir);
  }
  if (f.gpus.empty()) {
    fmt::print("GPUs: no GPU: {}\n", f.no_gpu_reason);
  } else {
    fmt::print("GPUs: {}\n", f.gpus.size());
    for (const auto& gpu : f.gpus) {
      fmt::print("  {}\n", gpu_line(gpu));
      fmt::print("    FABRIC probe (create + export): {}\n", fabric_probe_text(gpu));
      fmt::print("    NVLink domain: {}\n",
                 gpu.nvlink_domain.empty() ? "none (" + gpu.nvlink_domain_reason + ")" : gpu.nvlink_domain);
    }
    if (f.gpus.size() > 1) {
      fmt::print("P2P access:\n");
      for (const auto& line : f.p2p_lines) fmt::print("  {}\n", line);
    }
  }
  fmt::print("\nplacements here (model {}, tables {}, tp {}):\n", model_name, format_gib(sizes.tables_bytes), sizes.tp);
  for (const PlacementVerdict& v : judge_placements(f, sizes)) fmt::print("  {}: {}\n", v.placement, v.verdict);
}

Json doctor_json(const Facts& f, const std::string& model_name, const HostTableSizes& sizes) {
  Json j = json_document("doctor");
  j["host"] = {{"hostname", f.hostname}, {"boot_id", f.boot_id},
               {"environment", runtime_environment_name(f.environment)}};
  j["shm"] = {{"mounted", f.shm_mounted},
              {"total_bytes", f.shm_mounted ? Json(f.shm_total_bytes) : Json(nullptr)},
              {"free_bytes", f.shm_mounted ? Json(f.shm_free_bytes) : Json(nullptr)},
              {"not_tmpfs", f.shm_not_tmpfs.empty() ? Json(nullptr) : Json(f.shm_not_tmpfs)}};
  j["imex_channels"] = f.imex_channels;
  j["cuda_built"] = f.cuda_built;
  j["no_gpu_reason"] = f.gpus.empty() ? Json(f.no_gpu_reason) : Json(nullptr);
  j["gpus"] = Json::array();
  for (const auto& gpu : f.gpus) {
    j["gpus"].push_back({{"ordinal", gpu.ordinal},
                         {"summary", gpu_line(gpu)},
                         {"vmm", gpu.vmm},
                         {"posix_fd", gpu.posix_fd},
                         {"fabric_attribute", gpu.fabric_attribute},
                         {"fabric_works", gpu.fabric_works},
                         {"fabric_error", gpu.fabric_works ? Json(nullptr) : Json(fabric_probe_text(gpu))},
                         {"nvlink_domain", gpu.nvlink_domain.empty() ? Json(nullptr) : Json(gpu.nvlink_domain)},
                         {"nvlink_domain_reason",
                          gpu.nvlink_domain.empty() ? Json(gpu.nvlink_domain_reason) : Json(nullptr)}});
  }
  j["p2p"] = f.p2p_lines;
  j["model"] = {{"name", model_name},
                {"table_bytes_total", sizes.tables_bytes},
                {"tp", sizes.tp},
                {"tp_slice_bytes_max", sizes.tp_slice_bytes_max}};
  j["placements"] = Json::array();
  for (const PlacementVerdict& v : judge_placements(f, sizes))
    j["placements"].push_back({{"placement", v.placement}, {"verdict", v.verdict}});
  j["warnings"] = Json::array();
  j["error"] = nullptr;
  return j;
}

CommandRegistration reg("50-doctor", [](CLI::App& app, int& exit_code) {
  struct Flags {
    std::string model = "deepseek-v4.1-flash";
    std::string tp_text = "1";
    bool json = false;
    // The bridge (apps/deployment_bridge.h, apps/doctor_cluster.h).
    BridgeFlags bridge;
    bool emit_host = false;
    bool local = false;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("doctor", "Preflight: GPUs, VMM handle types, FABRIC probe, IMEX, P2P, /dev/shm, "
                                               "and what each placement would do here");
  cmd->add_option("--model", flags->model, "model preset whose tables size the host placements")->capture_default_str();
  cmd->add_option(kTpSpelling.names, flags->tp_text,
                  spelled("attention TP ranks per replica: host placements hold TP slices", kTpSpelling))
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "print a machine-readable JSON document");
  add_bridge_flags(*cmd, flags->bridge, "");
  cmd->add_flag("--emit-host", flags->emit_host,
                "print this host's entry of a deployment file's hosts: (YAML); under a launcher rank 0 prints "
                "every host's");
  cmd->add_flag("--local", flags->local,
                "read this process's host alone, even under a launcher (which otherwise gathers every host's facts "
                "on rank 0)");
  cmd->callback([flags, &exit_code] {
    auto spec = model_preset(flags->model);
    if (!spec.is_ok()) {
      fmt::print(stderr, "engramlab doctor: {}\n", spec.status().to_string());
      if (flags->json) fmt::print("{}\n", dump_json(error_document("doctor", spec.status())));
      exit_code = 2;
      return;
    }
    auto tp = whole_number_flag<int>("--tp", flags->tp_text, 1, kMaxGpusPerHost);
    if (!tp.is_ok()) {
      fmt::print(stderr, "engramlab doctor: {}\n", tp.status().to_string());
      if (flags->json) fmt::print("{}\n", dump_json(error_document("doctor", tp.status())));
      exit_code = 2;
      return;
    }
    // The bridge: --file, --emit-host, and a launched job's facts gathered
    // on rank 0 (apps/deployment_bridge.h, apps/doctor_cluster.h).
    auto bridge = load_bridge(flags->bridge);
    auto env = doctor_launch_env(flags->local);
    Status input = !bridge.is_ok() ? bridge.status() : !env.is_ok() ? env.status() : Status::ok();
    if (input.is_ok() && flags->emit_host && (flags->json || !flags->bridge.file.empty()))
      input = invalid_argument("--emit-host: prints YAML alone; leave --json and --file out");
    auto observe = input.is_ok() ? doctor_observe_options(*env) : Result<ObserveOptions>(input);
    if (!observe.is_ok()) {
      fmt::print(stderr, "engramlab doctor: {}\n", observe.status().to_string());
      if (flags->json) fmt::print("{}\n", dump_json(error_document("doctor", observe.status())));
      exit_code = 2;
      return;
    }
    const DeploymentBridge* file = *bridge ? &**bridge : nullptr;
    const Facts facts = observe_this_host(*observe);
    if (*env) {
      exit_code = run_doctor_cluster(**env, facts, {flags->json, flags->emit_host, file});
      return;
    }
    if (flags->emit_host) {
      fmt::print("{}\n", host_entry_yaml(single_host(facts)));
      exit_code = 0;
      return;
    }
    std::optional<FileCheck> check;
    if (file != nullptr) check = check_against_file(*file, -1, 0, false, facts);
    if (flags->json) {
      Json doc = doctor_json(facts, flags->model, host_table_sizes(*spec, *tp));
      doc["file_check"] = file_check_json(file, check ? &*check : nullptr);
      if (check && !check->passed())
        doc["error"] = error_json(check->error.is_ok() ? failed_precondition(fmt::format(
                                                             "this host is not the one {} describes", file->file.source))
                                                       : check->error);
      fmt::print("{}\n", dump_json(doc));
    } else {
      report(facts, flags->model, host_table_sizes(*spec, *tp));
      if (check) {
        fmt::print("\n");
        print_file_check(stdout, "", *file, *check);
      }
    }
    exit_code = check && !check->passed() ? 1 : 0;
  });
});

}  // namespace
}  // namespace engram::app
