// What `fuzz --file F --sites a,b` aims a sweep at (harness/swarm.h's
// SwarmTarget), read from the command's flags: F is a deployment file
// (core/deployment_file/deployment_yaml.h) or a scenario file (harness/scenario.h;
// its topology, config, timeouts and lookup are kept, its faults and
// expectations left to the seed).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "harness/swarm.h"

namespace engram::harness {

// "import,slow" -> the sites; an unknown name is invalid_argument naming it,
// a guess and every known site.
Result<std::vector<sim::FaultSite>> parse_fault_site_list(std::string_view text);

// `file` empty: no deployment (the topology is drawn). Errors name the file.
Result<SwarmTarget> load_swarm_target(const std::string& file, std::string_view sites_text);

}  // namespace engram::harness
