// `engramlab completion bash`: generated from the registered commands, it
// is valid bash and completes commands, subcommands and each command's flags.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/engramlab_command.h"

namespace engram {
namespace {

using ::testing::HasSubstr;
using testing::run_engramlab;

// What bash completes for the words `line` (the cursor after its last word).
std::string complete(const std::string& line) {
  const auto out = run_engramlab(
      "completion bash", "",
      "| bash -c 'source /dev/stdin; COMP_WORDS=(" + line + "); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); "
      "_engramlab; printf \"%s\\n\" \"${COMPREPLY[@]}\"'");
  EXPECT_EQ(out.exit_code, 0) << out.text;
  return out.text;
}

TEST(CompletionCommand, TheScriptIsBashAndCompletesFromTheCommandsRegistered) {
  const auto syntax = run_engramlab("completion bash", "", "| bash -n");
  EXPECT_EQ(syntax.exit_code, 0) << syntax.text;
  EXPECT_THAT(complete("engramlab pl"), HasSubstr("plan"));
  EXPECT_THAT(complete("engramlab plan --compare-e"), HasSubstr("--compare-engines"));
  EXPECT_THAT(complete("engramlab plan --fr"), HasSubstr("--from"));
  EXPECT_THAT(complete("engramlab scenario r"), HasSubstr("run"));
  EXPECT_THAT(complete("engramlab scenario run --se"), HasSubstr("--seed"));
  EXPECT_THAT(complete("engramlab fuzz --bri"), HasSubstr("--brief"));
  const auto zsh = run_engramlab("completion zsh");
  EXPECT_EQ(zsh.exit_code, 2);
  EXPECT_THAT(zsh.text, HasSubstr("write bash"));
}

}  // namespace
}  // namespace engram
