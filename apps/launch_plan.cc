#include "apps/launch_plan.h"

#include <fmt/format.h>

#include "apps/engine_choice.h"
#include "core/deployment_file/deployment_yaml.h"
#include "core/engines/engine_profile.h"
#include "core/plan/memory_fit.h"

namespace engram::app {

Result<LaunchPlan> plan_before_launch(const std::string& engine_flag, const std::string& file, int world) {
  LaunchPlan out;
  if (file.empty()) {
    if (engine_flag.empty()) return out;
    ENGRAM_ASSIGN_OR_RETURN(const EngineId engine, chosen_engine(engine_flag, ipc::process_env(), std::nullopt));
    out.engine = engine_name(engine);
    return out;
  }
  ENGRAM_ASSIGN_OR_RETURN(Deployment d, load_deployment_file(file));
  ENGRAM_ASSIGN_OR_RETURN(d.engine.profile, chosen_engine(engine_flag, ipc::process_env(), d.engine.profile));
  const char* engine = engine_name(d.engine.profile);
  if (world != d.layout.world_size())
    return invalid_argument(fmt::format(
        "--file {}: its layout is tp {} x dp {} = {} ranks, and this launch starts {} (--nnodes x --nproc-per-node); "
        "launch the file's world, or edit its layout",
        file, d.layout.tp, d.layout.dp, d.layout.world_size(), world));
  WarningSink sink;  // `plan --file` shows the warnings
  Result<FitCheckedPlan> checked = plan_with_memory_fit(d, sink);
  if (!checked.is_ok())
    return Status(checked.status().code(),
                  fmt::format("--file {} (engine {}): {}", file, engine, checked.status().message()));
  if (!checked->fits.is_ok())
    return Status(checked->fits.code(), fmt::format("--file {} (engine {}): {}", file, engine, checked->fits.message()));
  out.engine = engine;
  for (const PlacementGroupSummary& g : checked->plan.groups)
    out.lines.push_back(fmt::format("engine {} plans {}: ranks {}: {} ({})", engine, file, g.ranks_text,
                                    placement_name(g.placement), g.reason));
  return out;
}

}  // namespace engram::app
