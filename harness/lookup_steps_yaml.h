// Reading a scenario's lookup in steps (harness/lookup_steps.h) from its
// `lookup` section: `requests` and `steps` (or `steps: drawn`). Every error
// is "<file>: line L, column C: <field>: <problem and fix>", all of a file's
// errors in one report (FieldErrors).
#pragma once

#include <yaml-cpp/yaml.h>

#include "core/base/field_errors.h"
#include "core/deployment/deployment.h"
#include "harness/lookup_steps.h"
#include "harness/scenario_reader.h"

namespace engram::harness {

// The fields themselves (request numbers against lookup.requests).
void parse_lookup_steps(const ScenarioReader& r, const YAML::Node& lookup, LookupSteps& out, FieldErrors& e);

// Against the deployment, once every field read: instances and handovers
// against layout.dp, cp_prefill against layout.prefill_cp, each step's
// tokens on one replica against config.tokens_per_rank_max.
void check_lookup_steps(const ScenarioReader& r, const YAML::Node& lookup, const LookupSteps& steps,
                        const Deployment& d, FieldErrors& e);

}  // namespace engram::harness
