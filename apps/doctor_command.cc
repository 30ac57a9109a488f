// `engramlab doctor`: a preflight of this machine for the Engram placements.
// Reports the GPUs and their VMM handle types, the real FABRIC probe (the
// attribute alone lies without an IMEX channel), IMEX channels, P2P between
// every GPU pair, /dev/shm, the host identity, its RAM (MemTotal), the memory
// cgroup it runs in and the transparent-hugepage settings, and what each
// placement would do here and why: the memory fit (core/plan/memory_fit.h)
// judges each on this host, as a rank started here would. Everything is
// judged by one engine's rules (--engine, else the launcher's
// ENGRAMLAB_ENGINE, else --file's engine.name, else engramlab:
// apps/engine_choice.h): what that engine builds here by its defaults, with
// device tables and with each of its host layouts, and its refusals in its
// own words. Runs without GPUs or CUDA support too, and says so.
// Exit code 0: it is a report; a missing capability is a finding, not a failure.
// The bridge: --file compares this host with a deployment file's entry (exit
// 1 on any difference), --emit-host prints that entry, and under a launcher
// rank 0 prints every host (apps/doctor_cluster.h).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "apps/command_registry.h"
#include "core/base/fixes_once.h"
#include "apps/deployment_bridge.h"
#include "apps/doctor_cluster.h"
#include "apps/engine_choice.h"
#include "apps/observed_host_here.h"
#include "apps/flag_numbers.h"
#include "apps/flag_spellings.h"
#include "core/base/text_excerpt.h"
#include "backends/ipc/imex_channels.h"
#include "backends/ipc/iommu_probe.h"
#include "core/base/json_output.h"
#include "core/deployment/deployment.h"
#include "core/engines/engine_profile.h"
#include "core/lookup/tp_heads.h"
#include "core/model/table_spec.h"
#include "core/placements/placement.h"
#include "core/plan/deployment_plan.h"
#include "core/plan/memory_fit.h"
#include "core/plan/shm_fix.h"
#include "core/base/units.h"
#include "backends/shm/memory_cgroup.h"

namespace engram::app {
namespace {

using ipc::kImexChannelDir;

// The doctor reads the host as the backends read it for a real run
// (apps/observed_host_here.h), so it cannot judge a machine the runtime sees
// otherwise: a /dev/shm that is a disk directory is no tmpfs here either.
// Beside what the bridge compares, what the memory verdicts read: the
// memory cgroup in full (its usage too), the transparent-hugepage settings
// and /dev/shm's huge= option.
struct Facts : ObservedHost {
  std::optional<shm::MemoryCgroup> cgroup;      // the memory cgroup that limits this process
  std::string cgroup_error;                     // why it could not be read
  std::string thp_enabled, thp_shmem_enabled;   // the selected [value] of each; "" when absent
  std::string shm_huge;                         // /dev/shm's huge= mount option; "" when none
  ipc::IommuFacts iommu;                        // whether device reads of host memory are translated
  uint64_t gpu_memory_bytes = 0;                // the first readable GPU's total; 0: none
};

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

// The [selected] word of a sysfs choice file such as
// /sys/kernel/mm/transparent_hugepage/enabled ("always [madvise] never").
std::string selected_choice(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return "";
  const size_t open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos || close < open ? line
                                                                                   : line.substr(open + 1, close - open - 1);
}

// The huge= option of the tmpfs mounted at `dir` ("" when none or no tmpfs).
std::string tmpfs_huge_option(const std::string& dir) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line, found;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount_point;
    fields >> id >> parent >> dev >> root >> mount_point;
    const size_t dash = line.find(" - ");
    if (mount_point != dir || dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype, source, options;
    tail >> fstype >> source >> options;
    found.clear();  // the last mount at the directory is the one seen
    if (fstype != "tmpfs") continue;
    std::istringstream list(options);
    for (std::string option; std::getline(list, option, ',');)
      if (option.rfind("huge=", 0) == 0) found = option.substr(5);
  }
  return found;
}

// The bridge's facts of this host and, beside them, what only the doctor's
// memory verdicts read.
Facts with_memory_facts(ObservedHost observed) {
  Facts f;
  static_cast<ObservedHost&>(f) = std::move(observed);
  auto cgroup = shm::this_process_memory_cgroup();
  if (cgroup.is_ok()) f.cgroup = *cgroup;
  else f.cgroup_error = cgroup.status().message();
  f.thp_enabled = selected_choice("/sys/kernel/mm/transparent_hugepage/enabled");
  f.thp_shmem_enabled = selected_choice("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  f.shm_huge = tmpfs_huge_option(f.shm_dir);
  f.iommu = ipc::read_iommu_facts();
  if (const ObservedGpu* gpu = first_readable_gpu(f)) f.gpu_memory_bytes = gpu->memory_bytes_total;
  return f;
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
  bool fits = true;  // the memory fit does not refuse it here
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

// This host as a deployment, for the memory fit: a rank per GPU (tp ranks
// where it has fewer, or none), the DP replicas --tp leaves, its GPU memory,
// RAM, /dev/shm and environment, and the memory cgroup this process runs in
// as a limit over every rank it would hold (the ranks a launcher starts here
// inherit it).
Deployment this_host(const Facts& f, const std::string& model, int tp, EngineId engine) {
  const int gpus = static_cast<int>(f.gpus.size());
  const int world = gpus >= tp && gpus % tp == 0 ? gpus : tp;
  HostSpec host;
  host.name = f.hostname;
  host.gpu_count = world;
  host.gpu_memory_bytes = f.gpu_memory_bytes;  // 0: the GPU model's figure
  host.host_memory_bytes = f.host_memory_bytes.value_or(0);
  host.shm_mounted = f.shm_mounted;
  host.tmpfs_bytes_total = f.shm_mounted ? f.shm_total_bytes : 0;
  host.environment = f.environment;
  if (f.cgroup) host.memory_limit_bytes = f.cgroup->limit_bytes;
  Deployment d;
  d.model = model;
  d.hosts = {host};
  d.layout.tp = tp;
  d.layout.dp = world / tp;
  d.engine.profile = engine;
  return d;
}

// One config planned on this host: the placements it gives, or why not, and
// what the memory fit says of them.
struct HostJudgement {
  Status planned;                // the plan's error: an engine's refusal is invalid_argument
  std::vector<Placement> gives;  // in rank order, each once
  std::string defaults;          // the engine's defaults it applied ("config.cpu_offload: true (...)")
  std::string fit;               // "" fits; else why not
};

HostJudgement judge_on_host(const Deployment& d) {
  HostJudgement j;
  WarningSink quiet;
  const Result<PlanResult> plan = plan_deployment(d, quiet);
  if (!plan.is_ok()) {
    j.planned = plan.status();
    return j;
  }
  for (const RankPlan& rp : plan->ranks)
    if (std::find(j.gives.begin(), j.gives.end(), rp.placement) == j.gives.end()) j.gives.push_back(rp.placement);
  for (const DefaultUsed& u : plan->deployment.defaults_used)
    if (u.field.rfind("config.", 0) == 0)
      j.defaults += fmt::format("{}{}: {} ({})", j.defaults.empty() ? "" : "; ", u.field, u.value, u.source);
  const Status fits = check_memory_fits(plan.value());
  if (fits.is_ok()) return j;
  j.fit = fits.message();
  const std::string lead = "the deployment cannot run: ";
  if (j.fit.rfind(lead, 0) == 0) j.fit = j.fit.substr(lead.size());
  return j;
}

// What the memory fit says of `ops` on this host: "" where it fits (or the
// fit cannot judge it: a device placement without a GPU), else why not.
// Where the plan gives another placement here, it says which; where the
// engine refuses the config, its words.
std::string fit_verdict(const PlacementOps& ops, const Deployment& here, bool have_gpus) {
  Deployment d = here;
  d.config = EngramConfig{};
  d.config.cpu_offload_given = true;  // as asked: off unless the placement asks for host tables
  if (ops.ask_plan_for != nullptr) ops.ask_plan_for(d.config);
  const HostJudgement j = judge_on_host(d);
  // Without a GPU a device placement is judged by its own verdict, unless the engine refuses it.
  if (ops.needs_device && !have_gpus && j.planned.code() != ErrorCode::kInvalidArgument) return "";
  if (!j.planned.is_ok()) return "cannot here: " + j.planned.message();
  for (Placement p : j.gives)
    if (p != ops.id)
      return fmt::format(" (at tp {} x dp {} on this host the plan gives {})", d.layout.tp, d.layout.dp,
                         placement_name(p));
  return j.fit.empty() ? "" : "does not fit here: " + j.fit;
}

// What the engine builds on this host: by its defaults (nothing written),
// with device tables (cpu_offload: false) and with each of its host layouts.
struct EngineVerdict {
  std::string asked;      // "its defaults", "cpu_offload: false", "host layout auto"
  std::string placement;  // "" where it refuses or cannot plan
  std::string verdict;
  bool fits = false;
};

std::vector<EngineVerdict> judge_engine(const EngineProfile& engine, const Deployment& here, bool have_gpus) {
  std::vector<std::pair<std::string, EngramConfig>> asks;
  asks.push_back({"its defaults", EngramConfig{}});
  EngramConfig device;
  device.cpu_offload_given = true;
  asks.push_back({"cpu_offload: false", device});
  for (const HostLayoutOption& layout : engine.host_layouts) {
    EngramConfig host;
    host.cpu_offload = host.cpu_offload_given = true;
    host.host_layout = layout.name;
    asks.push_back({fmt::format("host layout {}", layout.name), host});
  }
  std::vector<EngineVerdict> out;
  for (auto& [asked, config] : asks) {
    Deployment d = here;
    d.config = config;
    const HostJudgement j = judge_on_host(d);
    EngineVerdict v{asked, "", "", false};
    if (!j.planned.is_ok()) {
      v.verdict = (j.planned.code() == ErrorCode::kInvalidArgument ? "refused: " : "cannot here: ") + j.planned.message();
      out.push_back(std::move(v));
      continue;
    }
    bool on_device = false;
    for (Placement p : j.gives) {
      v.placement += (v.placement.empty() ? "" : ", ") + std::string(placement_name(p));
      on_device = on_device || is_device_placement(p);
    }
    v.fits = j.fit.empty() && (have_gpus || !on_device);
    v.verdict = on_device && !have_gpus ? "no GPU here to hold it"
                : j.fit.empty()         ? "fits here"
                                        : "does not fit here: " + j.fit;
    if (!j.defaults.empty()) v.verdict = j.defaults + "; " + v.verdict;
    out.push_back(std::move(v));
  }
  return out;
}

// Every registered placement's verdict, in its doctor position: the memory
// fit's refusal where it refuses, else the placement's own.
std::vector<PlacementVerdict> judge_placements(const Facts& f, const std::string& model, const HostTableSizes& sizes,
                                               EngineId engine) {
  const DoctorFacts facts = doctor_facts(f, sizes);
  const Deployment here = this_host(f, model, sizes.tp, engine);
  std::vector<const PlacementOps*> listed;
  for (const PlacementOps& ops : placement_registry()) listed.push_back(&ops);
  std::sort(listed.begin(), listed.end(),
            [](const PlacementOps* a, const PlacementOps* b) { return a->doctor_position < b->doctor_position; });
  std::vector<PlacementVerdict> out;
  for (const PlacementOps* ops : listed) {
    const std::string fit = fit_verdict(*ops, here, facts.have_gpus);
    PlacementVerdict v{ops->name, ops->doctor_verdict(facts), true};
    if (fit.rfind(" (", 0) == 0) v.verdict += fit;  // the plan gives another placement: its own verdict stands
    else if (!fit.empty()) v = {ops->name, fit, false};
    out.push_back(std::move(v));
  }
  return out;
}

std::string memory_line(const Facts& f) {
  std::string line = f.host_memory_bytes ? fmt::format("{} RAM (MemTotal)", format_gib(*f.host_memory_bytes))
                                         : std::string("RAM unknown (/proc/meminfo unreadable)");
  if (f.cgroup)
    line += fmt::format("; memory cgroup {}: limit {}, {} in use (every rank started here shares it)",
                        f.cgroup->path, format_gib(f.cgroup->limit_bytes), format_gib(f.cgroup->usage_bytes));
  else if (!f.cgroup_error.empty())
    line += "; memory cgroup unreadable: " + f.cgroup_error;
  else
    line += "; no memory cgroup limit";
  return line;
}

std::string hugepage_line(const Facts& f) {
  return fmt::format("transparent hugepages: {}; shmem (tmpfs) {}; /dev/shm huge={}",
                     f.thp_enabled.empty() ? "unknown" : f.thp_enabled,
                     f.thp_shmem_enabled.empty() ? "unknown" : f.thp_shmem_enabled,
                     f.shm_huge.empty() ? "(none: 4 KiB pages unless shmem says otherwise)" : f.shm_huge);
}

void report(const Facts& f, const std::string& model_name, const HostTableSizes& sizes, EngineId engine_id) {
  fmt::print("engramlab doctor\n\n");
  fmt::print("host: {} (boot id {}; {})\n", f.hostname, f.boot_id, runtime_environment_name(f.environment));
  if (f.shm_mounted) {
    fmt::print("/dev/shm: {} total, {} free\n", format_gib(f.shm_total_bytes), format_gib(f.shm_free_bytes));
  } else if (!f.shm_not_tmpfs.empty()) {
    fmt::print("/dev/shm: not a tmpfs: {}\n", f.shm_not_tmpfs);
  } else {
    fmt::print("/dev/shm: not mounted\n");
  }
  fmt::print("memory: {}\n", memory_line(f));
  fmt::print("{}\n", hugepage_line(f));
  fmt::print("IOMMU: {}\n", ipc::iommu_text(f.iommu));
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
  const EngineProfile& engine = engine_profile(engine_id);
  // The verdicts below repeat long fixes (one per placement): each is said
  // once, numbered, and referenced after.
  std::vector<std::string> verdicts;
  const std::vector<EngineVerdict> engine_verdicts =
      judge_engine(engine, this_host(f, model_name, sizes.tp, engine_id), !f.gpus.empty());
  for (const EngineVerdict& v : engine_verdicts)
    verdicts.push_back(fmt::format("  {}: {}{}", v.asked, v.placement.empty() ? "" : v.placement + ": ", v.verdict));
  for (const PlacementVerdict& v : judge_placements(f, model_name, sizes, engine_id))
    verdicts.push_back(fmt::format("  {}: {}", v.placement, v.verdict));
  verdicts = say_fixes_once(verdicts);
  fmt::print("\nengine {} here (model {}, tp {}; its rules from {}):\n", engine.name, model_name, sizes.tp, engine.source);
  for (size_t i = 0; i < verdicts.size(); ++i) {
    if (i == engine_verdicts.size())
      fmt::print("\nplacements here (model {}, tables {}, tp {}, engine {}):\n", model_name,
                 format_gib(sizes.tables_bytes), sizes.tp, engine.name);
    fmt::print("{}\n", verdicts[i]);
  }
}

Json doctor_json(const Facts& f, const std::string& model_name, const HostTableSizes& sizes, EngineId engine_id) {
  Json j = json_document("doctor");
  j["host"] = {{"hostname", f.hostname}, {"boot_id", f.boot_id},
               {"environment", runtime_environment_name(f.environment)}};
  j["shm"] = {{"mounted", f.shm_mounted},
              {"total_bytes", f.shm_mounted ? Json(f.shm_total_bytes) : Json(nullptr)},
              {"free_bytes", f.shm_mounted ? Json(f.shm_free_bytes) : Json(nullptr)},
              {"not_tmpfs", f.shm_not_tmpfs.empty() ? Json(nullptr) : Json(f.shm_not_tmpfs)}};
  j["memory"] = {{"host_memory_bytes", f.host_memory_bytes ? Json(*f.host_memory_bytes) : Json(nullptr)},
                 {"cgroup", f.cgroup ? Json{{"path", f.cgroup->path},
                                            {"limit_bytes", f.cgroup->limit_bytes},
                                            {"usage_bytes", f.cgroup->usage_bytes}}
                                     : Json(nullptr)},
                 {"cgroup_error", f.cgroup_error.empty() ? Json(nullptr) : Json(f.cgroup_error)}};
  j["transparent_hugepages"] = {{"enabled", f.thp_enabled.empty() ? Json(nullptr) : Json(f.thp_enabled)},
                                {"shmem_enabled", f.thp_shmem_enabled.empty() ? Json(nullptr) : Json(f.thp_shmem_enabled)},
                                {"shm_huge", f.shm_huge.empty() ? Json(nullptr) : Json(f.shm_huge)}};
  j["iommu"] = {{"groups", f.iommu.group_count},
                {"types", f.iommu.types},
                {"translated", f.iommu.translated},
                {"summary", ipc::iommu_text(f.iommu)}};
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
  const EngineProfile& engine = engine_profile(engine_id);
  Json builds = Json::array();
  for (const EngineVerdict& v : judge_engine(engine, this_host(f, model_name, sizes.tp, engine_id), !f.gpus.empty()))
    builds.push_back({{"asked", v.asked},
                      {"placement", v.placement.empty() ? Json(nullptr) : Json(v.placement)},
                      {"verdict", v.verdict},
                      {"fits", v.fits}});
  j["engine"] = {{"name", engine.name}, {"source", engine.source}, {"builds", std::move(builds)}};
  j["placements"] = Json::array();
  for (const PlacementVerdict& v : judge_placements(f, model_name, sizes, engine_id))
    j["placements"].push_back({{"placement", v.placement}, {"verdict", v.verdict}, {"fits", v.fits}});
  j["warnings"] = Json::array();
  j["error"] = nullptr;
  return j;
}

CommandRegistration doctor_registration("50-doctor", [](CLI::App& app, int& exit_code) {
  struct Flags {
    std::string model = "deepseek-v4.1-flash";
    std::string tp_text = "1";
    std::string engine;  // "": apps/engine_choice.h's order
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
  cmd->add_option("--engine", flags->engine,
                  fmt::format("whose rules judge this host: {} (default: ENGRAMLAB_ENGINE, which `engramlab launch "
                              "--engine` sets, else --file's engine.name, else engramlab)",
                              engine_names_text()));
  cmd->add_flag("--json", flags->json, "print a machine-readable JSON document");
  add_bridge_flags(*cmd, flags->bridge, "the engine whose rules judge it (engine.name)");
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
    const Result<EngineId> engine = chosen_engine(
        flags->engine, ipc::process_env(),
        file != nullptr ? std::optional<EngineId>(file->file.deployment.engine.profile) : std::nullopt);
    if (!engine.is_ok()) {
      fmt::print(stderr, "engramlab doctor: {}\n", engine.status().to_string());
      if (flags->json) fmt::print("{}\n", dump_json(error_document("doctor", engine.status())));
      exit_code = 2;
      return;
    }
    const Facts facts = with_memory_facts(observe_this_host(*observe));
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
      Json doc = doctor_json(facts, flags->model, host_table_sizes(*spec, *tp), *engine);
      doc["file_check"] = file_check_json(file, check ? &*check : nullptr);
      if (check && !check->passed())
        doc["error"] = error_json(check->error.is_ok() ? failed_precondition(fmt::format(
                                                             "this host is not the one {} describes", file->file.source))
                                                       : check->error);
      fmt::print("{}\n", dump_json(doc));
    } else {
      report(facts, flags->model, host_table_sizes(*spec, *tp), *engine);
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
