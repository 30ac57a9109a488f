#include "backends/ipc/launch_env.h"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "backends/ipc/job_token.h"
#include "core/base/text_excerpt.h"
#include "core/deployment/deployment.h"

namespace engram::ipc {
namespace {

constexpr const char* kLaunchHint =
    "start ranks with `engramlab launch`, torchrun, srun or mpirun (each sets its own variables)";

Result<int> parse_int(const std::string& name, const std::string& text, int min_value) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end == nullptr || *end != '\0' || errno != 0 || value < min_value || value > 1 << 24) {
    return invalid_argument(name + "='" + excerpt(text) + "' is not an integer >= " + std::to_string(min_value) +
                            "; " + kLaunchHint);
  }
  return static_cast<int>(value);
}

// A world size: checked where read, before anything is sized by it (a rank
// 0 sized for 16 million members takes gigabytes before it fails).
Result<int> parse_world_size(const std::string& name, const std::string& text) {
  ENGRAM_ASSIGN_OR_RETURN(const int value, parse_int(name, text, 1));
  if (value > kMaxRanks) {
    return invalid_argument(fmt::format("{}={} is above {}, the most ranks a job may have; {}", name, value,
                                        kMaxRanks, kLaunchHint));
  }
  return value;
}

Result<uint16_t> parse_port(const std::string& name, const std::string& text) {
  ENGRAM_ASSIGN_OR_RETURN(int value, parse_int(name, text, 1));
  if (value > 65535) return invalid_argument(fmt::format("{}={} is above 65535; pick a free TCP port", name, text));
  return static_cast<uint16_t>(value);
}

// One launcher's names for the rank variables.
struct RankNames {
  const char* launcher;
  const char* rank;
  const char* world;
  const char* local;
  const char* local_world;  // may be absent
};

constexpr RankNames kTorchStyle{"torchrun-style", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
constexpr RankNames kOpenMpi{"open mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                             "OMPI_COMM_WORLD_LOCAL_SIZE"};
constexpr RankNames kSlurm{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr};

Status read_ranks(const EnvLookup& env, const RankNames& n, LaunchEnv& out) {
  auto required = [&](const char* name, int min_value) -> Result<int> {
    const auto text = env(name);
    if (!text) {
      return invalid_argument(fmt::format("{} is not set though {} is (a {} launch): export {}=<value>; {}", name,
                                          n.rank, n.launcher, name, kLaunchHint));
    }
    return parse_int(name, *text, min_value);
  };
  ENGRAM_ASSIGN_OR_RETURN(out.rank, required(n.rank, 0));
  {
    const auto world_text = env(n.world);
    if (!world_text) ENGRAM_RETURN_IF_ERROR(required(n.world, 1).status());
    ENGRAM_ASSIGN_OR_RETURN(out.world_size, parse_world_size(n.world, *world_text));
  }
  ENGRAM_ASSIGN_OR_RETURN(out.local_rank, required(n.local, 0));
  if (n.local_world != nullptr) {
    if (auto text = env(n.local_world)) { ENGRAM_ASSIGN_OR_RETURN(out.local_world_size, parse_int(n.local_world, *text, 1)); }
  }
  if (out.rank >= out.world_size) {
    return invalid_argument(fmt::format("{}={} is not below {}={}: ranks are 0..{}-1", n.rank, out.rank, n.world,
                                        out.world_size, n.world));
  }
  if (out.local_rank >= out.world_size) {
    return invalid_argument(fmt::format("{}={} is not below {}={}", n.local, out.local_rank, n.world, out.world_size));
  }
  if (out.local_world_size > 0 && out.local_rank >= out.local_world_size) {
    return invalid_argument(fmt::format("{}={} is not below {}={}", n.local, out.local_rank, n.local_world,
                                        out.local_world_size));
  }
  out.launcher = n.launcher;
  return Status::ok();
}

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool is_true(const std::optional<std::string>& text) {
  if (!text) return false;
  std::string lower;
  for (char c : *text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "true" || lower == "1" || lower == "yes";
}

}  // namespace

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

Status check_job_id(const std::string& job_id, const std::string& where) {
  if (job_id.empty() || job_id.size() > 64) {
    return invalid_argument(where + " '" + excerpt(job_id) + "' must be 1..64 characters of [A-Za-z0-9._-]");
  }
  for (char c : job_id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) {
      return invalid_argument(where + " '" + excerpt(job_id) + "' holds '" + excerpt(std::string(1, c)) +
                              "': only [A-Za-z0-9._-] may appear (it names sockets and /dev/shm segments)");
    }
  }
  if (job_id == "." || job_id == "..") return invalid_argument(where + " may not be '.' or '..'");
  return Status::ok();
}

Result<std::string> first_slurm_host(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets; each bracket group
  // "[a-b,c]" stands for its first number, zero padding as written.
  std::string host;
  int depth = 0;
  bool in_first_range = false, range_done = false;
  for (char c : nodelist) {
    if (c == '[') {
      if (depth++ != 0) return invalid_argument("SLURM_STEP_NODELIST='" + nodelist + "': nested '['");
      in_first_range = true;
      range_done = false;
      continue;
    }
    if (c == ']') {
      if (depth-- != 1) return invalid_argument("SLURM_STEP_NODELIST='" + nodelist + "': unbalanced ']'");
      in_first_range = false;
      continue;
    }
    if (depth == 0 && c == ',') break;
    if (in_first_range) {
      if (c == '-' || c == ',') range_done = true;
      else if (!range_done) host += c;
      continue;
    }
    host += c;
  }
  if (depth != 0 || host.empty())
    return invalid_argument("SLURM_STEP_NODELIST='" + nodelist + "' names no host; export MASTER_ADDR=<rank 0's host>");
  return host;
}

uint16_t derived_port(const std::string& job_key) { return static_cast<uint16_t>(20000 + fnv1a(job_key) % 12000); }

std::string job_id_part(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    out += ok ? c : '-';
    if (out.size() == 40) break;
  }
  return out;
}

Result<LaunchEnv> read_launch_env(const EnvLookup& env) {
  LaunchEnv out;
  const bool torchrun = env("TORCHELASTIC_RUN_ID").has_value();
  // The launcher's identity and the default job key / port for each kind.
  std::string default_job_id;
  std::optional<uint16_t> port;
  std::string port_source;
  const auto master_port = env("MASTER_PORT");
  if (env("RANK")) {
    ENGRAM_RETURN_IF_ERROR(read_ranks(env, kTorchStyle, out));
    if (torchrun) out.launcher = "torchrun";
    if (!master_port) {
      return invalid_argument(fmt::format("MASTER_PORT is not set ({} launch): export MASTER_PORT=<free TCP port on "
                                          "rank 0's host>, e.g. 29500",
                                          out.launcher));
    }
    ENGRAM_ASSIGN_OR_RETURN(uint16_t given, parse_port("MASTER_PORT", *master_port));
    if (torchrun && is_true(env("TORCHELASTIC_USE_AGENT_STORE"))) {
      // The agent on rank 0's host serves its store on MASTER_PORT: binding
      // it would fail with "Address already in use".
      if (given == 65535) {
        return invalid_argument("MASTER_PORT=65535 is held by torchrun's agent and there is no port above it: "
                                "export ENGRAMLAB_MASTER_PORT=<free port> on every node");
      }
      port = static_cast<uint16_t>(given + 1);
      port_source = fmt::format("MASTER_PORT + 1 = {} (torchrun's agent serves its store on MASTER_PORT={})", *port,
                                given);
    } else {
      port = given;
      port_source = fmt::format("MASTER_PORT={}", given);
    }
    if (torchrun) {
      default_job_id = fmt::format("torchrun-{}-{}", job_id_part(*env("TORCHELASTIC_RUN_ID")), given);
    }
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    ENGRAM_RETURN_IF_ERROR(read_ranks(env, kOpenMpi, out));
    // PMIx names the job (Open MPI 5, and 4 with PMIx); Open MPI 4's own
    // job id otherwise.
    std::optional<std::string> job = env("PMIX_NAMESPACE");
    if (!job) job = env("OMPI_MCA_ess_base_jobid");
    if (job) {
      default_job_id = fmt::format("ompi-{:016x}", fnv1a(*job));
      port = derived_port("ompi:" + *job);
      port_source = fmt::format("{} (derived from the Open MPI job id '{}'; mpirun gives no port)", *port, *job);
    }
    if (master_port) {
      ENGRAM_ASSIGN_OR_RETURN(port, parse_port("MASTER_PORT", *master_port));
      port_source = fmt::format("MASTER_PORT={}", *port);
    }
  } else if (env("SLURM_PROCID")) {
    ENGRAM_RETURN_IF_ERROR(read_ranks(env, kSlurm, out));
    if (auto tasks = env("SLURM_NTASKS_PER_NODE"); tasks && tasks->find_first_not_of("0123456789") == std::string::npos) {
      ENGRAM_ASSIGN_OR_RETURN(out.local_world_size, parse_int("SLURM_NTASKS_PER_NODE", *tasks, 1));
    }
    const auto job = env("SLURM_JOB_ID");
    if (!job) {
      return invalid_argument("SLURM_JOB_ID is not set though SLURM_PROCID is: start the ranks with srun inside an "
                              "allocation (sbatch or salloc)");
    }
    const std::string step = env("SLURM_STEP_ID").value_or("0");
    default_job_id = fmt::format("slurm-{}-{}", job_id_part(*job), job_id_part(step));
    port = derived_port("slurm:" + *job + "." + step);
    port_source = fmt::format("{} (derived from SLURM_JOB_ID={} and SLURM_STEP_ID={}; srun gives no port)", *port,
                              *job, step);
    if (master_port) {
      ENGRAM_ASSIGN_OR_RETURN(port, parse_port("MASTER_PORT", *master_port));
      port_source = fmt::format("MASTER_PORT={}", *port);
    }
  } else {
    return invalid_argument(
        "this process was not started by a launcher: none of RANK (engramlab launch, torchrun), OMPI_COMM_WORLD_RANK "
        "(mpirun) or SLURM_PROCID (srun) is set; " + std::string(kLaunchHint));
  }

  // Address: MASTER_ADDR wins; otherwise what the launcher implies.
  if (auto addr = env("MASTER_ADDR"); addr && !addr->empty()) {
    ENGRAM_RETURN_IF_ERROR(check_master_addr(*addr, "MASTER_ADDR"));
    out.master_addr = *addr;
  } else if (out.launcher == "slurm") {
    std::optional<std::string> nodes = env("SLURM_STEP_NODELIST");
    if (!nodes) nodes = env("SLURM_JOB_NODELIST");
    if (!nodes) nodes = env("SLURM_NODELIST");
    if (!nodes) {
      return invalid_argument("MASTER_ADDR is not set and neither is SLURM_STEP_NODELIST (nor SLURM_JOB_NODELIST): "
                              "export MASTER_ADDR=<address of rank 0's host>");
    }
    ENGRAM_ASSIGN_OR_RETURN(out.master_addr, first_slurm_host(*nodes));
    ENGRAM_RETURN_IF_ERROR(check_master_addr(out.master_addr, "the first host of the Slurm node list"));
  } else if (out.launcher == "open mpi" && out.local_world_size == out.world_size) {
    out.master_addr = "127.0.0.1";  // every rank on this host
  } else {
    return invalid_argument(fmt::format(
        "MASTER_ADDR is not set ({} launch): export MASTER_ADDR=<address of rank 0's host>{}", out.launcher,
        out.launcher == "open mpi" ? " and pass it to every rank with mpirun -x MASTER_ADDR" : ""));
  }

  // Port: ENGRAMLAB_MASTER_PORT over everything.
  if (auto own = env("ENGRAMLAB_MASTER_PORT"); own && !own->empty()) {
    ENGRAM_ASSIGN_OR_RETURN(port, parse_port("ENGRAMLAB_MASTER_PORT", *own));
    port_source = fmt::format("ENGRAMLAB_MASTER_PORT={}", *port);
  }
  if (!port) {
    return invalid_argument(fmt::format("no rendezvous port: export MASTER_PORT=<free TCP port on rank 0's host> "
                                        "(e.g. 29500){}",
                                        out.launcher == "open mpi" ? " and pass it with mpirun -x MASTER_PORT" : ""));
  }
  out.master_port = *port;
  out.rendezvous_source = fmt::format("{}:{} ({} launch; address {}; port {})", out.master_addr, out.master_port,
                                      out.launcher, env("MASTER_ADDR") ? "MASTER_ADDR" : "from the launcher",
                                      port_source);

  const auto token = env("ENGRAMLAB_JOB_TOKEN");
  ENGRAM_RETURN_IF_ERROR(check_job_token(token));
  out.job_token = *token;

  if (auto id = env("ENGRAMLAB_JOB_ID")) {
    out.job_id = *id;
    ENGRAM_RETURN_IF_ERROR(check_job_id(out.job_id, "ENGRAMLAB_JOB_ID"));
  } else if (!default_job_id.empty()) {
    out.job_id = default_job_id;
    ENGRAM_RETURN_IF_ERROR(check_job_id(out.job_id, "the job id derived from the launcher"));
  } else {
    return invalid_argument("ENGRAMLAB_JOB_ID is not set: export ENGRAMLAB_JOB_ID=<unique name for this job> (it "
                            "names the fd sockets and /dev/shm segments), or use `engramlab launch --job-id`");
  }
  out.shm_name_part = shm_name_part(out.job_token, out.job_id);
  return out;
}

Status check_master_addr(const std::string& addr, const std::string& where) {
  const bool fits = !addr.empty() && addr.size() <= 255 &&
                    addr.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:%[]") ==
                        std::string::npos;
  if (fits) return Status::ok();
  return invalid_argument(fmt::format("{}='{}' is not a host name or IP address (letters, digits and . - _ : % [ ], at "
                                      "most 255 bytes); give rank 0's host, e.g. {}=10.0.0.1",
                                      where, excerpt(addr), where));
}

Status check_job_token(const std::optional<std::string>& token) {
  if (token && token->size() >= kMinJobTokenChars && token->size() <= kMaxJobTokenBytes) return Status::ok();
  const std::string what = !token ? "not set"
                           : token->size() < kMinJobTokenChars
                               ? fmt::format("{} characters, shorter than {}", token->size(), kMinJobTokenChars)
                               : fmt::format("{} bytes, longer than {} (the fd channel's limit)", token->size(),
                                             kMaxJobTokenBytes);
  return invalid_argument(fmt::format(
      "ENGRAMLAB_JOB_TOKEN is {}: every rank of the job needs the same secret of {}..{} characters. Set it once "
      "before the launcher starts: {} (srun passes it on; mpirun needs -x ENGRAMLAB_JOB_TOKEN; with torchrun on "
      "several nodes export the same value on each), or let `engramlab launch` make one",
      what, kMinJobTokenChars, kMaxJobTokenBytes, kJobTokenLine));
}

}  // namespace engram::ipc
