#include "apps/engine_choice.h"

#include <string>

#include "core/engines/engine_profile.h"

namespace engram::app {

Result<EngineId> chosen_engine(std::string_view flag, const ipc::EnvLookup& env, std::optional<EngineId> from_file) {
  if (!flag.empty()) return parse_engine(flag, "--engine");
  if (const std::optional<std::string> handed = env(kEngineEnv); handed && !handed->empty())
    return parse_engine(*handed, kEngineEnv);
  return from_file.value_or(EngineId::kEngramlab);
}

}  // namespace engram::app
