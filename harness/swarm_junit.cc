#include "harness/swarm_junit.h"

#include <fmt/format.h>

#include <map>
#include <vector>

#include "harness/junit_xml.h"

namespace engram::harness {

std::string swarm_junit_xml(const SwarmReport& report, const std::string& file) {
  std::map<uint64_t, const SwarmSeedResult*> failed;
  for (const auto& f : report.failures) failed[f.seed] = &f;
  std::vector<JunitCase> cases;
  const std::string classname = "fuzz" + (file.empty() ? "" : "." + file);
  for (int i = 0; i < report.seed_count; ++i) {
    const uint64_t seed = report.first_seed + static_cast<uint64_t>(i);
    JunitCase c{.name = fmt::format("seed {}", seed), .classname = classname};
    if (auto f = failed.find(seed); f != failed.end()) {
      c.failed = true;
      c.failure_message = f->second->outcome;
      c.failure_text = "job: " + f->second->description + "\n";
      for (const auto& v : f->second->violations) c.failure_text += "- " + v + "\n";
      c.failure_text += "reproduce: " + f->second->reproduction + "\n";
    }
    cases.push_back(std::move(c));
  }
  if (report.seed_count >= kEverySiteSweepSeeds) {
    JunitCase c{.name = "every fault site fired", .classname = classname};
    for (sim::FaultSite site : report.sites_never_fired())
      c.failure_text += fmt::format("{}{}", c.failure_text.empty() ? "never fired: " : ", ", sim::fault_site_name(site));
    c.failed = !c.failure_text.empty();
    c.failure_message = c.failure_text;
    cases.push_back(std::move(c));
  }
  return junit_xml("engramlab fuzz", cases);
}

}  // namespace engram::harness
