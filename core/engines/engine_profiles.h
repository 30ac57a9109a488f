// The profiles the registration table (engine_registry.cc) lists, each
// defined in its own file.
#pragma once

#include "core/engines/engine_profile.h"

namespace engram {

extern const EngineProfile kEngramlabProfile;  // engramlab_profile.cc
extern const EngineProfile kVllmProfile;       // vllm_profile.cc
extern const EngineProfile kSglangProfile;     // sglang_profile.cc

}  // namespace engram
