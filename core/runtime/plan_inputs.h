// What the runtime's shared plan is decided from besides the gathered facts:
// the inputs themselves, as the key of the plans kept with one set of facts
// (core/runtime/shared_plan.cc), so a field added to the layout or the
// config takes part in the key without anyone remembering to add it.
#pragma once

#include <cstddef>
#include <string>

#include "core/deployment/deployment.h"

namespace engram {

struct RuntimeOptions;  // core/runtime/engram_runtime.h

struct PlanInputs {
  std::string placement_model;
  ParallelLayout layout;
  EngramConfig config;
  EngineMemory engine;

  static PlanInputs of(const RuntimeOptions& options);
  bool operator==(const PlanInputs&) const = default;
};

// Combines every member of every part. Each part is taken apart by a
// structured binding naming all its members, so a member added to
// PlanInputs, ParallelLayout, EngramConfig or EngineMemory fails to compile there until the
// hash takes it too (equality, defaulted, takes it by itself).
struct PlanInputsHash {
  size_t operator()(const PlanInputs& inputs) const noexcept;
};

}  // namespace engram
