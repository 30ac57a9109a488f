// A sweep's JUnit XML report (`fuzz --junitxml FILE`), for a CI dashboard:
// a testcase per seed (a failing one with its outcome, job, violations and
// reproduce line) and, for a sweep that must fire every site, one for that.
#pragma once

#include <string>

#include "harness/swarm.h"

namespace engram::harness {

// `file`: the sweep's --file ("" for a fully drawn sweep), named in the classname.
std::string swarm_junit_xml(const SwarmReport& report, const std::string& file);

}  // namespace engram::harness
