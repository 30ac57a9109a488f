// The tests' main: GoogleTest's, plus a listener that names the running test
// to core/base/rerun_command. An emulated run that fails inside a test then
// prints a line that reruns that test, instead of "<test binary> fuzz ...",
// which only engramlab takes.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "core/base/rerun_command.h"
#include "core/base/shell_quote.h"
#include "tests/engramlab_rerun_suites.h"

namespace {

std::set<std::string>& engramlab_rerun_suites() {
  static std::set<std::string> suites;
  return suites;
}

class RerunTestLine : public ::testing::EmptyTestEventListener {
 public:
  explicit RerunTestLine(std::string binary) : binary_(std::move(binary)) {}

  void OnTestStart(const ::testing::TestInfo& test) override {
    const std::vector<std::string> words{binary_,
                                         "--gtest_filter=" + std::string(test.test_suite_name()) + "." + test.name()};
    engram::set_rerun_test_line(engram::shell_command(words));
    if (engramlab_rerun_suites().contains(test.test_suite_name()))
      engram::set_rerun_binary(std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab");
  }
  void OnTestEnd(const ::testing::TestInfo&) override { engram::set_rerun_test_line(""); }

 private:
  std::string binary_;
};

std::string this_binary(const char* argv0) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec || self.empty() ? std::string(argv0) : self.string();
}

}  // namespace

bool engram::testing::rerun_lines_name_engramlab(const char* test_suite) {
  engramlab_rerun_suites().insert(test_suite);
  return true;
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new RerunTestLine(this_binary(argv[0])));
  return RUN_ALL_TESTS();
}
