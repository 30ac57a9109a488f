// Test suites whose "reproduce:" lines name the built engramlab (an emulated
// run's `engramlab fuzz ...` / `scenario run ...` line) instead of rerunning
// the test. The suite is named to the tests' main (tests/test_main.cc), which
// names engramlab as the rerun binary as each of its tests starts: a static
// set_rerun_binary would name it for every test of the layer's binary.
#pragma once

namespace engram::testing {

// Returns true, so a file registers its suite with a namespace-scope
// `const bool`.
bool rerun_lines_name_engramlab(const char* test_suite);

}  // namespace engram::testing
