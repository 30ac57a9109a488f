#include "backends/ipc/launch_env.h"

#include <cerrno>
#include <cstdlib>

namespace engram::ipc {
namespace {

constexpr size_t kMinTokenChars = 16;
constexpr const char* kLaunchHint = "start ranks with `engramlab launch -n N -- CMD`, torchrun, or srun";

Result<int> parse_int(const std::string& name, const std::string& text, int min_value) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end == nullptr || *end != '\0' || errno != 0 || value < min_value || value > 1 << 24) {
    return invalid_argument(name + "='" + text + "' is not an integer >= " + std::to_string(min_value) +
                            "; " + kLaunchHint);
  }
  return static_cast<int>(value);
}

// Reads a value that either of two variables may carry; both set and
// different is a contradiction.
Result<std::optional<int>> read_pair(const EnvLookup& env, const std::string& primary, const std::string& secondary,
                                     int min_value) {
  const auto a = env(primary);
  const auto b = env(secondary);
  std::optional<int> va, vb;
  if (a) { ENGRAM_ASSIGN_OR_RETURN(va, parse_int(primary, *a, min_value)); }
  if (b) { ENGRAM_ASSIGN_OR_RETURN(vb, parse_int(secondary, *b, min_value)); }
  if (va && vb && *va != *vb) {
    return invalid_argument(primary + "=" + std::to_string(*va) + " contradicts " + secondary + "=" +
                            std::to_string(*vb) + ": unset one of them (mixing launchers?)");
  }
  return va ? va : vb;
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
    return invalid_argument(where + " '" + job_id + "' must be 1..64 characters of [A-Za-z0-9._-]");
  }
  for (char c : job_id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) {
      return invalid_argument(where + " '" + job_id + "' holds '" + std::string(1, c) +
                              "': only [A-Za-z0-9._-] may appear (it names sockets and /dev/shm segments)");
    }
  }
  if (job_id == "." || job_id == "..") return invalid_argument(where + " may not be '.' or '..'");
  return Status::ok();
}

Result<LaunchEnv> read_launch_env(const EnvLookup& env) {
  LaunchEnv out;
  const bool slurm = env("SLURM_PROCID").has_value();
  out.launcher = env("RANK") ? "torchrun-style" : (slurm ? "slurm" : "none");

  ENGRAM_ASSIGN_OR_RETURN(auto rank, read_pair(env, "RANK", "SLURM_PROCID", 0));
  if (!rank) return invalid_argument("RANK is not set (nor SLURM_PROCID): " + std::string(kLaunchHint));
  ENGRAM_ASSIGN_OR_RETURN(auto world, read_pair(env, "WORLD_SIZE", "SLURM_NTASKS", 1));
  if (!world) {
    return invalid_argument("WORLD_SIZE is not set (nor SLURM_NTASKS) though RANK is: export WORLD_SIZE=<ranks>; " +
                            std::string(kLaunchHint));
  }
  ENGRAM_ASSIGN_OR_RETURN(auto local, read_pair(env, "LOCAL_RANK", "SLURM_LOCALID", 0));
  if (!local) {
    return invalid_argument("LOCAL_RANK is not set (nor SLURM_LOCALID): export LOCAL_RANK=<rank on this host>; " +
                            std::string(kLaunchHint));
  }
  if (*rank >= *world) {
    return invalid_argument("RANK=" + std::to_string(*rank) + " is not below WORLD_SIZE=" + std::to_string(*world) +
                            ": ranks are 0..WORLD_SIZE-1");
  }
  if (*local >= *world) {
    return invalid_argument("LOCAL_RANK=" + std::to_string(*local) + " is not below WORLD_SIZE=" +
                            std::to_string(*world));
  }
  out.rank = *rank;
  out.world_size = *world;
  out.local_rank = *local;

  if (auto addr = env("MASTER_ADDR"); addr && !addr->empty()) {
    out.master_addr = *addr;
  } else if (auto node = env("SLURM_LAUNCH_NODE_IPADDR"); slurm && node && !node->empty()) {
    out.master_addr = *node;
  } else {
    return invalid_argument("MASTER_ADDR is not set" + std::string(slurm ? " (nor SLURM_LAUNCH_NODE_IPADDR)" : "") +
                            ": export MASTER_ADDR=<address of rank 0's host>");
  }
  const auto port = env("MASTER_PORT");
  if (!port) return invalid_argument("MASTER_PORT is not set: export MASTER_PORT=<free TCP port on rank 0's host>, e.g. 29500");
  ENGRAM_ASSIGN_OR_RETURN(int port_value, parse_int("MASTER_PORT", *port, 1));
  if (port_value > 65535) return invalid_argument("MASTER_PORT=" + *port + " is above 65535");
  out.master_port = static_cast<uint16_t>(port_value);

  const auto token = env("ENGRAMLAB_JOB_TOKEN");
  if (!token || token->size() < kMinTokenChars) {
    return invalid_argument(std::string("ENGRAMLAB_JOB_TOKEN is ") + (token ? "shorter than 16 characters" : "not set") +
                            ": every rank needs the same secret; export ENGRAMLAB_JOB_TOKEN=$(head -c16 /dev/urandom "
                            "| od -An -tx1 | tr -d ' \\n') before srun/torchrun, or use `engramlab launch`");
  }
  out.job_token = *token;

  if (auto id = env("ENGRAMLAB_JOB_ID")) {
    out.job_id = *id;
    ENGRAM_RETURN_IF_ERROR(check_job_id(out.job_id, "ENGRAMLAB_JOB_ID"));
  } else if (auto slurm_id = env("SLURM_JOB_ID"); slurm && slurm_id) {
    out.job_id = "slurm" + *slurm_id;
    ENGRAM_RETURN_IF_ERROR(check_job_id(out.job_id, "SLURM_JOB_ID"));
  } else {
    return invalid_argument("ENGRAMLAB_JOB_ID is not set: export ENGRAMLAB_JOB_ID=<unique name for this job> (it "
                            "names the fd sockets and /dev/shm segments), or use `engramlab launch --job-id`");
  }
  return out;
}

}  // namespace engram::ipc
