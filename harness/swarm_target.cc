#include "harness/swarm_target.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>

#include "core/base/did_you_mean.h"
#include "core/base/rerun_command.h"
#include "core/base/text_excerpt.h"
#include "core/base/yaml_fields.h"
#include "core/deployment_file/deployment_yaml.h"
#include "harness/scenario.h"

namespace engram::harness {
namespace {

// Keys only a scenario file has: any of them makes the file a scenario.
constexpr const char* kScenarioOnlyKeys[] = {"expect", "faults", "lookup", "seed", "name", "description"};

}  // namespace

Result<std::vector<sim::FaultSite>> parse_fault_site_list(std::string_view text) {
  std::vector<sim::FaultSite> sites;
  std::vector<std::string> known;
  for (const sim::FaultSiteInfo& info : sim::kFaultSites) known.emplace_back(info.name);
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string name(text.substr(start, comma - start));
    start = comma + 1;
    if (name.empty()) continue;
    auto site = sim::parse_fault_site(name);
    if (!site.is_ok()) {
      const std::string guess = did_you_mean(name, known);
      return invalid_argument(fmt::format("--sites: '{}' is not a fault site{}; the sites are: {}", excerpt(name),
                                          guess.empty() ? "" : " (" + guess + ")", sim::fault_site_names()));
    }
    if (std::find(sites.begin(), sites.end(), site.value()) == sites.end()) sites.push_back(site.value());
  }
  if (sites.empty() && !text.empty())
    return invalid_argument(fmt::format("--sites: '{}' names no site; give a comma-separated list of: {}", excerpt(text),
                                        sim::fault_site_names()));
  return sites;
}

Result<SwarmTarget> load_swarm_target(const std::string& file, std::string_view sites_text) {
  SwarmTarget target;
  ENGRAM_ASSIGN_OR_RETURN(target.sites, parse_fault_site_list(sites_text));
  if (file.empty()) return target;
  // Read once: the kind of file, its parse and what an emitted scenario
  // copies all come from this one text.
  ENGRAM_ASSIGN_OR_RETURN(target.file_text, read_text_file(file, "--file"));
  ENGRAM_ASSIGN_OR_RETURN(YAML::Node root, load_yaml_text(target.file_text, file));
  bool scenario = false;
  if (root.IsMap())
    for (const char* key : kScenarioOnlyKeys) scenario = scenario || static_cast<bool>(root[key]);
  if (scenario) {
    ENGRAM_ASSIGN_OR_RETURN(Scenario s, parse_scenario(root, file));
    target.deployment = s.deployment;
    target.lookup = s.lookup;
  } else {
    ENGRAM_ASSIGN_OR_RETURN(target.deployment, parse_deployment(root, file));
  }
  target.timeouts_written = root.IsMap() && static_cast<bool>(root["timeouts"]);
  target.file = absolute_file_path(file);
  return target;
}

}  // namespace engram::harness
