// `plan --explain`: each decision of a plan and the rule of the engine
// profile that made it (core/engines/engine_rule.h), with its source.
#pragma once

#include <vector>

#include "core/engines/engine_profile.h"
#include "core/plan/deployment_plan.h"

namespace engram {

// `plan` holds the ranks, groups and warnings already decided; `deployment`
// is the completed one they were decided for.
std::vector<DecidedBy> explain_decisions(const EngineProfile& engine, const Deployment& deployment,
                                         const PlanResult& plan, const ModelSpec& model);

// "  ranks 0-7: host_head_sharded\n    by vllm rule host_placement: ...\n    source: ...\n" per decision.
std::string format_decided_by(const std::vector<DecidedBy>& decisions);

}  // namespace engram
