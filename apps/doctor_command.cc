// `engramlab doctor`: a preflight of this machine for the Engram placements.
// Reports the GPUs and their VMM handle types, the real FABRIC probe (the
// attribute alone lies without an IMEX channel), IMEX channels, P2P between
// every GPU pair, /dev/shm, the host identity, and what each placement would
// do here and why. Runs without GPUs or CUDA support too, and says so.
// Exit code 0: it is a report; a missing capability is a finding, not a failure.
#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "apps/command_registry.h"
#include "apps/flag_numbers.h"
#include "backends/ipc/imex_channels.h"
#include "backends/ipc/runtime_environment_probe.h"
#include "core/base/json_output.h"
#include "core/deployment/deployment.h"
#include "core/lookup/tp_heads.h"
#include "core/model/table_spec.h"
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
  std::vector<std::string> imex_channels;
  bool cuda_built = false;
  std::string no_gpu_reason;
  std::vector<GpuFacts> gpus;
  std::vector<std::string> p2p_lines;
  bool p2p_all = true;
  RuntimeEnvironment environment = RuntimeEnvironment::kBareMetal;
};

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

void probe_host(Facts& f) {
  char name[256] = {};
  f.hostname = gethostname(name, sizeof(name) - 1) == 0 ? name : "(gethostname failed)";
  f.boot_id = read_first_line("/proc/sys/kernel/random/boot_id");
  if (f.boot_id.empty()) f.boot_id = "(unreadable)";
  struct statvfs vfs {};
  if (statvfs("/dev/shm", &vfs) == 0) {
    f.shm_mounted = true;
    f.shm_total_bytes = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
    f.shm_free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  }
  f.imex_channels = ipc::imex_channels();
  f.environment = ipc::detect_runtime_environment();
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

std::vector<PlacementVerdict> judge_placements(const Facts& f, const HostTableSizes& sizes) {
  const uint64_t tables_bytes = sizes.tables_bytes;
  std::vector<PlacementVerdict> out;
  auto add = [&](const char* placement, std::string verdict) { out.push_back({placement, std::move(verdict)}); };
  const bool have_gpus = !f.gpus.empty();
  // The same conditions as the handle exchange's choice (choose_handle_type):
  // FABRIC needs the probe, an IMEX channel and one non-empty NVLink domain.
  bool all_fabric = have_gpus, all_posix = have_gpus, all_vmm = have_gpus;
  std::string fabric_why;
  for (const auto& gpu : f.gpus) {
    all_fabric = all_fabric && gpu.fabric_works;
    all_posix = all_posix && gpu.posix_fd;
    all_vmm = all_vmm && gpu.vmm;
    if (!gpu.fabric_works && fabric_why.empty())
      fabric_why = fmt::format("the FABRIC probe failed on GPU {}: {}", gpu.ordinal, gpu.fabric_error);
  }
  if (fabric_why.empty() && have_gpus) {
    for (const auto& gpu : f.gpus) {
      if (gpu.nvlink_domain.empty()) {
        fabric_why = fmt::format("GPU {} has no NVLink domain: {}", gpu.ordinal, gpu.nvlink_domain_reason);
        break;
      }
      if (gpu.nvlink_domain != f.gpus.front().nvlink_domain) {
        fabric_why = fmt::format("GPUs {} and {} are in different NVLink domains", f.gpus.front().ordinal, gpu.ordinal);
        break;
      }
    }
  }
  if (fabric_why.empty() && have_gpus && f.imex_channels.empty())
    fabric_why = fmt::format("no IMEX channel in {}", kImexChannelDir);
  all_fabric = all_fabric && fabric_why.empty();

  if (!have_gpus) {
    add("device_peer", "unavailable: no GPU");
  } else if (!all_vmm) {
    add("device_peer", "unavailable: a GPU lacks VMM support");
  } else if (all_fabric) {
    add("device_peer", fmt::format("FABRIC handles (probe works, IMEX channel present, NVLink domain {}): can span "
                                   "hosts of that domain",
                                   f.gpus.front().nvlink_domain));
  } else if (all_posix) {
    add("device_peer", fmt::format("POSIX fds within this host only, not FABRIC: {}{}", fabric_why,
                                   f.p2p_all ? "" : "; WARNING: some GPU pairs lack P2P access, their peer reads "
                                                    "would fail"));
  } else {
    add("device_peer", "unavailable: neither FABRIC nor POSIX-fd handles work here");
  }
  if (!have_gpus) {
    add("device_collective", "unavailable: no GPU");
  } else {
    add("device_collective", "NCCL all-gather + reduce-scatter over the TP group; table/tp HBM per GPU");
  }
  if (!f.shm_mounted) {
    add("host_shared", fmt::format("falls back to host_head_sharded: /dev/shm is not mounted; {}",
                                   shm_fix_text(tables_bytes, f.environment)));
  } else if (f.shm_total_bytes < tables_bytes) {
    add("host_shared", fmt::format("falls back to host_head_sharded: /dev/shm total {} < tables {}; {}",
                                   format_gib(f.shm_total_bytes), format_gib(tables_bytes),
                                   shm_fix_text(tables_bytes, f.environment)));
  } else {
    add("host_shared",
        fmt::format("one copy per node fits: /dev/shm total {} >= tables {}; each rank maps its TP slice ({} at tp "
                    "{}){}",
                    format_gib(f.shm_total_bytes), format_gib(tables_bytes), format_gib(sizes.tp_slice_bytes_max),
                    sizes.tp,
                    f.shm_free_bytes < tables_bytes ? fmt::format(" (but only {} free now)", format_gib(f.shm_free_bytes))
                                                    : std::string()));
  }
  add("host_head_sharded", "available: one table per node in host memory, each rank one TP-major shard of the "
                           "heads (1/(tp x node-local replicas)), collectives per step");
  add("host_private", fmt::format("available: one table per replica, {} of host memory per rank at tp {} (its TP "
                                  "slice)",
                                  format_gib(sizes.tp_slice_bytes_max), sizes.tp));
  return out;
}

void report(const Facts& f, const std::string& model_name, const HostTableSizes& sizes) {
  fmt::print("engramlab doctor\n\n");
  fmt::print("host: {} (boot id {}; {})\n", f.hostname, f.boot_id, runtime_environment_name(f.environment));
  if (f.shm_mounted) {
    fmt::print("/dev/shm: {} total, {} free\n", format_gib(f.shm_total_bytes), format_gib(f.shm_free_bytes));
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
              {"free_bytes", f.shm_mounted ? Json(f.shm_free_bytes) : Json(nullptr)}};
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
  cmd->add_option("--tp", flags->tp_text, "attention TP ranks per replica: host placements hold TP slices")
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
