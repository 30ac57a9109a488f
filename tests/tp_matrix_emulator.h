// Runs vLLM's Engram test matrix (tests/tp_matrix_cases.h) on the emulator:
// each case's scenario must pass, its lookups bitwise against the CPU
// reference. Shared by the matrix tests of every engine.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/emulated_scenario.h"
#include "harness/scenario.h"
#include "tests/tp_matrix_cases.h"

namespace engram::testing {

inline void run_tp_matrix_on_emulator(const std::vector<TpMatrixCase>& cases) {
  for (const TpMatrixCase& c : cases) {
    auto scenario = harness::parse_scenario_text(c.scenario_text(), c.name());
    ASSERT_TRUE(scenario.is_ok()) << c.name() << ": " << scenario.status().to_string();
    const harness::ScenarioOutcome outcome = harness::run_scenario(scenario.value());
    std::string failures;
    for (const std::string& f : outcome.failures) failures += "\n  " + f;
    EXPECT_TRUE(outcome.passed) << c.name() << ":" << failures << "\n" << c.scenario_text();
  }
}

}  // namespace engram::testing
