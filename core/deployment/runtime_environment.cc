#include "core/deployment/runtime_environment.h"
#include "core/base/text_excerpt.h"

#include <fmt/format.h>

namespace engram {

const char* runtime_environment_name(RuntimeEnvironment environment) {
  switch (environment) {
    case RuntimeEnvironment::kUnknown: return "unknown";
    case RuntimeEnvironment::kBareMetal: return "bare_metal";
    case RuntimeEnvironment::kDocker: return "docker";
    case RuntimeEnvironment::kKubernetes: return "kubernetes";
  }
  return "unknown";
}

Result<RuntimeEnvironment> parse_runtime_environment(std::string_view text, std::string_view field) {
  for (RuntimeEnvironment e : {RuntimeEnvironment::kUnknown, RuntimeEnvironment::kBareMetal,
                               RuntimeEnvironment::kDocker, RuntimeEnvironment::kKubernetes}) {
    if (text == runtime_environment_name(e)) return e;
  }
  return invalid_argument(fmt::format("{}: '{}' is not a runtime environment; write bare_metal, docker, kubernetes "
                                      "or unknown",
                                      field, excerpt(text)));
}

}  // namespace engram
