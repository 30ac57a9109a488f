// `engramlab doctor`: a preflight of this machine for the Engram placements.
// Reports the GPUs and their VMM handle types, the real FABRIC probe (the
// attribute alone lies without an IMEX channel), IMEX channels, P2P between
// every GPU pair, /dev/shm, the host identity, and what each placement would
// do here and why. Runs without GPUs or CUDA support too, and says so.
// Exit code 0: it is a report; a missing capability is a finding, not a failure.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "apps/command_registry.h"
#include "apps/flag_numbers.h"
#include "apps/flag_spellings.h"
#include "core/base/text_excerpt.h"
#include "backends/ipc/imex_channels.h"
#include "backends/ipc/proc_host_probe.h"
#include "backends/shm/posix_shared_memory.h"
#include "backends/ipc/runtime_environment_probe.h"
#include "core/base/json_output.h"
#include "core/deployment/deployment.h"
#include "core/lookup/tp_heads.h"
#include "core/model/table_spec.h"
#include "core/placements/placement.h"
#include "core/plan/shm_fix.h"
#include "core/base/units.h"

#ifdef ENGRAM_HAVE_CUDA_BACKEND
#include "backends/cuda/cuda_device_memory.h"
#include "backends/cuda/cuda_driver.h"
#include "backends/cuda/gpu_host_probe.h"
#endif

namespace engram::app {
namespace {

using ipc::kImexChannelDir;

struct GpuFacts {
  int ordinal = -1;
  std::string line;  // already formatted
  bool vmm = false;
  bool posix_fd = false;
  bool fabric_attribute = false;
  bool fabric_works = false;
  std::string fabric_error;  // the probe's Status text when it failed
  std::string nvlink_domain;         // NVML fabric clusterUuid/cliqueId; "" when none
  std::string nvlink_domain_reason;  // why nvlink_domain is empty
};

struct Facts {
  std::string hostname;
  std::string boot_id;
  bool shm_mounted = false;
  uint64_t shm_total_bytes = 0;
  uint64_t shm_free_bytes = 0;
  std::string shm_not_tmpfs;  // why /dev/shm holds no tables when it exists but is not a tmpfs
  std::vector<std::string> imex_channels;
  bool cuda_built = false;
  std::string no_gpu_reason;
  std::vector<GpuFacts> gpus;
  std::vector<std::string> p2p_lines;
  bool p2p_all = true;
  RuntimeEnvironment environment = RuntimeEnvironment::kBareMetal;
};

// The host facts as the backends read them for a real run (the placement
// decides on these), so the doctor cannot judge a machine the runtime sees
// otherwise: a /dev/shm that is a disk directory is no tmpfs here either.
void probe_host(Facts& f) {
  const PlacementFacts placement = ipc::ProcHostProbe().facts();
  f.hostname = placement.host.hostname.empty() ? "(uname failed)" : placement.host.hostname;
  f.boot_id = placement.host.boot_id.empty() ? "(unreadable)" : placement.host.boot_id;
  f.environment = placement.environment;
  auto shm = shm::PosixSharedMemory().info();
  if (shm.is_ok()) {
    f.shm_mounted = shm->mounted;
    f.shm_not_tmpfs = shm->not_tmpfs;
    f.shm_total_bytes = shm->tmpfs_bytes_total;
    f.shm_free_bytes = shm->tmpfs_bytes_free;
  } else {
    f.shm_not_tmpfs = shm.status().message();
  }
  f.imex_channels = ipc::imex_channels();
}

#ifdef ENGRAM_HAVE_CUDA_BACKEND
void probe_gpus(Facts& f) {
  f.cuda_built = true;
  const auto presence = cuda::gpu_presence();
  if (presence.count == 0) {
    f.no_gpu_reason = presence.reason;
    return;
  }
  for (int g = 0; g < presence.count; ++g) {
    GpuFacts gpu;
    gpu.ordinal = g;
    const cuda::NvlinkDomain domain = cuda::nvlink_domain_of_gpu(g);
    gpu.nvlink_domain = domain.domain;
    gpu.nvlink_domain_reason = domain.reason;
    auto memory = cuda::CudaDeviceMemory::open(g);
    if (!memory.is_ok()) {
      gpu.line = fmt::format("GPU {}: cannot open: {}", g, memory.status().to_string());
      f.gpus.push_back(gpu);
      continue;
    }
    auto info = (*memory)->info();
    if (!info.is_ok()) {
      gpu.line = fmt::format("GPU {}: cannot read attributes: {}", g, info.status().to_string());
      f.gpus.push_back(gpu);
      continue;
    }
    gpu.vmm = info->vmm_supported;
    gpu.posix_fd = info->posix_fd_supported;
    gpu.fabric_attribute = info->fabric_attribute;
    gpu.line = fmt::format("GPU {}: {}, {} total, {} free; VMM {}, POSIX fd {}, FABRIC attribute {}, granularity {}", g,
                           info->name, format_gib(info->memory_bytes_total), format_gib(info->memory_bytes_free),
                           gpu.vmm ? "yes" : "no", gpu.posix_fd ? "yes" : "no", gpu.fabric_attribute ? "yes" : "no",
                           format_bytes(info->granularity_bytes));
    Status probe = gpu.vmm ? (*memory)->probe_fabric()
                           : Status(ErrorCode::kFailedPrecondition, "no VMM support",
                                    ErrorContext{.step = device_step_name(DeviceStep::kProbeFabric)});
    gpu.fabric_works = probe.is_ok();
    if (!probe.is_ok()) gpu.fabric_error = probe.to_string();
    f.gpus.push_back(gpu);
  }
  for (int a = 0; a < presence.count; ++a) {
    for (int b = 0; b < presence.count; ++b) {
      if (a == b) continue;
      auto can = cuda::can_access_peer(a, b);
      if (!can.is_ok()) {
        f.p2p_all = false;
        f.p2p_lines.push_back(fmt::format("GPU {} -> GPU {}: unknown ({})", a, b, can.status().to_string()));
      } else {
        if (!*can) f.p2p_all = false;
        f.p2p_lines.push_back(fmt::format("GPU {} -> GPU {}: {}", a, b, *can ? "yes" : "NO"));
      }
    }
  }
}
#else
void probe_gpus(Facts& f) {
  f.cuda_built = false;
  f.no_gpu_reason = "CUDA support was not built into this engramlab (nvcc was not found at build time)";
}
#endif

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
      d.fabric_why = fmt::format("the FABRIC probe failed on GPU {}: {}", gpu.ordinal, gpu.fabric_error);
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
  d.hostname = f.hostname;
  d.environment = f.environment;
  // The DP replicas of one TP rank this host's GPUs hold: its node-local group.
  d.node_local_group_size = std::max<int>(1, static_cast<int>(f.gpus.size()) / sizes.tp);
  d.shm_fix = shm_fix_text(sizes.tables_bytes, f.environment);
  d.colocation_fix = colocation_fix_text(f.environment);
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
      fmt::print("  {}\n", gpu.line);
      fmt::print("    FABRIC probe (create + export): {}\n", gpu.fabric_works ? "works" : gpu.fabric_error);
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
                         {"summary", gpu.line},
                         {"vmm", gpu.vmm},
                         {"posix_fd", gpu.posix_fd},
                         {"fabric_attribute", gpu.fabric_attribute},
                         {"fabric_works", gpu.fabric_works},
                         {"fabric_error", gpu.fabric_works ? Json(nullptr) : Json(gpu.fabric_error)},
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
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("doctor", "Preflight: GPUs, VMM handle types, FABRIC probe, IMEX, P2P, /dev/shm, "
                                               "and what each placement would do here");
  cmd->add_option("--model", flags->model, "model preset whose tables size the host placements")->capture_default_str();
  cmd->add_option(kTpSpelling.names, flags->tp_text,
                  spelled("attention TP ranks per replica: host placements hold TP slices", kTpSpelling))
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "print a machine-readable JSON document");
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
    Facts facts;
    probe_host(facts);
    probe_gpus(facts);
    if (flags->json) {
      fmt::print("{}\n", dump_json(doctor_json(facts, flags->model, host_table_sizes(*spec, *tp))));
    } else {
      report(facts, flags->model, host_table_sizes(*spec, *tp));
    }
    exit_code = 0;
  });
});

}  // namespace
}  // namespace engram::app
