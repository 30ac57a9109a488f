// The profiles the registration table (engine_registry.cc) lists, each
// defined in its own file.
#pragma once

#include "core/engines/engine_profile.h"

namespace engram {

extern const EngineProfile kEngramlabProfile;  // engramlab_profile.cc
extern const EngineProfile kVllmProfile;       // vllm_profile.cc
extern const EngineProfile kSglangProfile;     // sglang_profile.cc

// vLLM's node-local Engram DP group size for a completed deployment
// (vllm_profile.cc): its _engram_dp_shard_size with replica TP x prefill CP,
// 1 under elastic EP.
int vllm_engram_dp_size(const Deployment& deployment);

}  // namespace engram
