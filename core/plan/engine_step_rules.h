// The engine rules that change a lookup step's time (core/placements/step_cost.h
// EngineStepRules), in one place: which collective brings rows back, whether
// buffers are padded to the DP slot, whether the lookup is prefetched on a
// side stream. Read from the engine's profile where it says so; the rest is
// here, each rule with where it was read.
#pragma once

#include "core/deployment/deployment.h"
#include "core/deployment/engine_id.h"
#include "core/placements/step_cost.h"

namespace engram {

EngineStepRules engine_step_rules(EngineId engine, const Deployment& deployment);

}  // namespace engram
