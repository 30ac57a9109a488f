#include "core/deployment/dp_shared_memory.h"

#include <fmt/format.h>

namespace engram {

DpSharedMemoryResolution resolve_dp_shared_memory(const EngramConfig& config, const ParallelLayout& layout) {
  DpSharedMemoryResolution out;
  if (config.dp_shared_memory.has_value()) {
    out.enabled = *config.dp_shared_memory;
    out.is_explicit = true;
    out.reason = out.enabled ? "dp_shared_memory: true as written (strict: every requirement must hold)"
                             : "dp_shared_memory: false as written";
    return out;
  }
  out.enabled = config.cpu_offload && layout.dp > 1 && !layout.elastic_ep;
  out.reason = fmt::format(
      "dp_shared_memory unset resolves to {}: cpu_offload {}, dp = {}{}, elastic EP {} "
      "(unset means enabled exactly when cpu_offload is on, dp > 1 and elastic EP is off)",
      out.enabled ? "enabled" : "disabled", config.cpu_offload ? "on" : "off", layout.dp,
      layout.dp > 1 ? " > 1" : "", layout.elastic_ep ? "on" : "off");
  return out;
}

}  // namespace engram
