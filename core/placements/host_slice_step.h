// The step every host placement whose TP ranks each read their own tokens'
// head slice shares (host_shared, host_private, SGLang's shared, numa_shared
// and file layouts): launch, the slice's rows from host memory (the GPU
// reading it, or the CPU where the GPU cannot address it), TP assembly.
#pragma once

#include "core/placements/step_cost.h"

namespace engram {

inline StepTime host_slice_step(const StepCostInput& in, const StepConstants& c, bool cpu_gathers = false) {
  StepBuilder b(in, c);
  const double rows = static_cast<double>(in.tokens) * ((in.heads + in.tp - 1) / in.tp);
  b.launch();
  if (cpu_gathers) b.cpu_rows(rows);
  else b.host_rows(rows);
  b.tp_assembly();
  return b.finish();
}

}  // namespace engram
