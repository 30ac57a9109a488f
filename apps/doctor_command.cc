// `engramlab doctor`: a preflight of this machine for the Engram placements.
// Reports the GPUs and their VMM handle types, the real FABRIC probe (the
// attribute alone lies without an IMEX channel), IMEX channels, P2P between
// every GPU pair, /dev/shm, the host identity, and what each placement would
// do here and why. Runs without GPUs or CUDA support too, and says so.
// Exit code 0: it is a report; a missing capability is a finding, not a failure.
#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "apps/command_registry.h"
#include "backends/ipc/imex_channels.h"
#include "core/model/table_spec.h"
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
                           : Status(ErrorCode::kFailedPrecondition, "no VMM support", ErrorContext{.step = "fabric probe"});
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

void report(const Facts& f, const std::string& model_name, uint64_t tables_bytes) {
  fmt::print("engramlab doctor\n\n");
  fmt::print("host: {} (boot id {})\n", f.hostname, f.boot_id);
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

  const bool have_gpus = !f.gpus.empty();
  if (!have_gpus) {
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

  fmt::print("\nplacements here (model {}, tables {}):\n", model_name, format_gib(tables_bytes));
  // device_peer
  if (!have_gpus) {
    fmt::print("  device_peer: unavailable: no GPU\n");
  } else if (!all_vmm) {
    fmt::print("  device_peer: unavailable: a GPU lacks VMM support\n");
  } else if (all_fabric) {
    fmt::print("  device_peer: FABRIC handles (probe works, IMEX channel present, NVLink domain {}): can span hosts "
               "of that domain\n",
               f.gpus.front().nvlink_domain);
  } else if (all_posix) {
    fmt::print("  device_peer: POSIX fds within this host only, not FABRIC: {}{}\n", fabric_why,
               f.p2p_all ? "" : "; WARNING: some GPU pairs lack P2P access, their peer reads would fail");
  } else {
    fmt::print("  device_peer: unavailable: neither FABRIC nor POSIX-fd handles work here\n");
  }
  // device_collective
  if (!have_gpus) {
    fmt::print("  device_collective: unavailable: no GPU\n");
  } else {
    fmt::print("  device_collective: NCCL all-gather + reduce-scatter over the TP group; table/tp HBM per GPU\n");
  }
  // host_shared
  if (!f.shm_mounted) {
    fmt::print("  host_shared: falls back to host_head_sharded: /dev/shm is not mounted\n");
  } else if (f.shm_total_bytes < tables_bytes) {
    fmt::print("  host_shared: falls back to host_head_sharded: /dev/shm total {} < tables {} "
               "(raise it with --shm-size or use --ipc=host)\n",
               format_gib(f.shm_total_bytes), format_gib(tables_bytes));
  } else {
    fmt::print("  host_shared: one copy per node fits: /dev/shm total {} >= tables {}{}\n", format_gib(f.shm_total_bytes),
               format_gib(tables_bytes),
               f.shm_free_bytes < tables_bytes ? fmt::format(" (but only {} free now)", format_gib(f.shm_free_bytes))
                                               : std::string());
  }
  fmt::print("  host_head_sharded: available: host memory, 1/dp of the heads per DP rank, collectives per step\n");
  fmt::print("  host_private: available: {} of host memory per rank\n", format_gib(tables_bytes));
}

CommandRegistration reg("50-doctor", [](CLI::App& app, int& exit_code) {
  auto model = std::make_shared<std::string>("deepseek-v4.1-flash");
  CLI::App* cmd = app.add_subcommand("doctor", "Preflight: GPUs, VMM handle types, FABRIC probe, IMEX, P2P, /dev/shm, "
                                               "and what each placement would do here");
  cmd->add_option("--model", *model, "model preset whose tables size the host placements")->capture_default_str();
  cmd->callback([model, &exit_code] {
    auto spec = model_preset(*model);
    if (!spec.is_ok()) {
      fmt::print(stderr, "engramlab doctor: {}\n", spec.status().to_string());
      exit_code = 2;
      return;
    }
    Facts facts;
    probe_host(facts);
    probe_gpus(facts);
    report(facts, *model, spec->table_bytes_total());
    exit_code = 0;
  });
});

}  // namespace
}  // namespace engram::app
