#include "backends/ipc/runtime_environment_probe.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace engram::ipc {

RuntimeEnvironment detect_runtime_environment(const RuntimeEnvironmentFiles& files) {
  namespace fs = std::filesystem;
  const fs::path root(files.root);
  std::error_code ec;
  if (files.kubernetes_env || fs::exists(root / "var/run/secrets/kubernetes.io", ec))
    return RuntimeEnvironment::kKubernetes;
  if (fs::exists(root / ".dockerenv", ec) || fs::exists(root / "run/.containerenv", ec))
    return RuntimeEnvironment::kDocker;
  std::ifstream cgroup(root / "proc/1/cgroup");
  std::stringstream text;
  text << cgroup.rdbuf();
  const std::string s = text.str();
  if (s.find("kubepods") != std::string::npos) return RuntimeEnvironment::kKubernetes;
  if (s.find("docker") != std::string::npos || s.find("containerd") != std::string::npos ||
      s.find("libpod") != std::string::npos)
    return RuntimeEnvironment::kDocker;
  return RuntimeEnvironment::kBareMetal;
}

RuntimeEnvironment runtime_environment_of_this_process() {
  if (const char* given = std::getenv("ENGRAMLAB_ENVIRONMENT"); given != nullptr) {
    auto parsed = parse_runtime_environment(given, "ENGRAMLAB_ENVIRONMENT");
    if (parsed.is_ok()) return parsed.value();
  }
  return detect_runtime_environment();
}

RuntimeEnvironment detect_runtime_environment() {
  return detect_runtime_environment({.root = "/", .kubernetes_env = std::getenv("KUBERNETES_SERVICE_HOST") != nullptr});
}

}  // namespace engram::ipc
