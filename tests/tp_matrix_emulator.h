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

// One scenario text on the emulator: it must parse and pass; a failure
// names the case, each failed expectation and the text.
inline void expect_scenario_text_passes(const std::string& name, const std::string& text) {
  auto scenario = harness::parse_scenario_text(text, name);
  ASSERT_TRUE(scenario.is_ok()) << name << ": " << scenario.status().to_string();
  const harness::ScenarioOutcome outcome = harness::run_scenario(scenario.value());
  std::string failures;
  for (const std::string& f : outcome.failures) failures += "\n  " + f;
  EXPECT_TRUE(outcome.passed) << name << ":" << failures << "\n" << text;
}

inline void run_tp_matrix_on_emulator(const std::vector<TpMatrixCase>& cases) {
  for (const TpMatrixCase& c : cases) expect_scenario_text_passes(c.name(), c.scenario_text());
}

}  // namespace engram::testing
