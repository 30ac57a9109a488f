// Which engine's rules (core/engines/) a command plans by, the same way on
// every command that plans: its own --engine where given, else the engine
// `engramlab launch --engine` (or its --file) handed the job's ranks in
// ENGRAMLAB_ENGINE, else the deployment file's engine.name, else engramlab.
// A flag overrides the file, as `plan --engine` does.
#pragma once

#include <optional>
#include <string_view>

#include "backends/ipc/launch_env.h"
#include "core/base/status.h"
#include "core/deployment/engine_id.h"

namespace engram::app {

// The variable `engramlab launch` sets on every rank it starts.
inline constexpr char kEngineEnv[] = "ENGRAMLAB_ENGINE";

// `flag` "" is not given; `from_file` nullopt is no deployment file.
// invalid_argument naming --engine or ENGRAMLAB_ENGINE, the value and the
// engines there are.
Result<EngineId> chosen_engine(std::string_view flag, const ipc::EnvLookup& env, std::optional<EngineId> from_file);

}  // namespace engram::app
