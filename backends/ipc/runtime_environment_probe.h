// Which environment this process runs in, for messages that name the fix
// that applies: Kubernetes (the service-account mount or KUBERNETES_SERVICE_HOST
// that every pod gets), a Docker or Podman container (/.dockerenv,
// /run/.containerenv, a container runtime in PID 1's cgroup), else a bare host.
#pragma once

#include <string>

#include "core/deployment/runtime_environment.h"

namespace engram::ipc {

struct RuntimeEnvironmentFiles {
  std::string root = "/";  // tests point this at a fake tree
  bool kubernetes_env = false;  // KUBERNETES_SERVICE_HOST is set
};

RuntimeEnvironment detect_runtime_environment(const RuntimeEnvironmentFiles& files);
RuntimeEnvironment detect_runtime_environment();  // this process

// ENGRAMLAB_ENVIRONMENT (bare_metal, docker, kubernetes, unknown) when set
// and valid, as `scenario run --real` sets it to the scenario host's; else
// detect_runtime_environment().
RuntimeEnvironment runtime_environment_of_this_process();

}  // namespace engram::ipc
