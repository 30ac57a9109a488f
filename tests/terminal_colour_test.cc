// Colour on a terminal only (issue 48, "output people read"): a pseudo
// terminal gets colour, a pipe does not, NO_COLOR and TERM=dumb turn it off;
// the colouring adds escapes around the verdict words and changes nothing else.
#include "core/base/terminal_colour.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <optional>
#include <regex>
#include <string>

namespace engram {
namespace {

// Sets (or unsets) an environment variable for the life of the guard.
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value == nullptr) ::unsetenv(name);
    else ::setenv(name, value, 1);
  }
  ~EnvVar() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A pseudo terminal's slave side: what a user's shell is.
struct Pty {
  int master = -1, slave = -1;
  Pty() {
    master = ::posix_openpt(O_RDWR | O_NOCTTY);
    if (master >= 0 && ::grantpt(master) == 0 && ::unlockpt(master) == 0)
      slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
  }
  ~Pty() {
    if (slave >= 0) ::close(slave);
    if (master >= 0) ::close(master);
  }
};

TEST(TerminalColour, ATerminalGetsColourAPipeDoesNotNorDoNoColorAndDumb) {
  Pty pty;
  if (pty.slave < 0) GTEST_SKIP() << "no pseudo terminal here (posix_openpt failed)";
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  {
    EnvVar no_colour("NO_COLOR", nullptr);
    EnvVar term("TERM", "xterm-256color");
    EXPECT_TRUE(colour_wanted(pty.slave));
    EXPECT_FALSE(colour_wanted(pipe_fds[1]));
  }
  {
    EnvVar no_colour("NO_COLOR", "1");
    EnvVar term("TERM", "xterm-256color");
    EXPECT_FALSE(colour_wanted(pty.slave));
  }
  {
    EnvVar no_colour("NO_COLOR", "");  // set but empty: no-color.org says colour stays
    EnvVar term("TERM", "xterm-256color");
    EXPECT_TRUE(colour_wanted(pty.slave));
  }
  {
    EnvVar no_colour("NO_COLOR", nullptr);
    EnvVar term("TERM", "dumb");
    EXPECT_FALSE(colour_wanted(pty.slave));
  }
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST(TerminalColour, VerdictWordsAreColouredAndTheTextIsOtherwiseTheSame) {
  const std::string report =
      "verdict: fits\n"
      "memory_limit  200 GiB  188.8 GiB  11.1 GiB (low)\n"
      "node-1  cannot run: refused (over)\n"
      "  [memory.headroom_low] only 11.1 GiB left\n"
      "a plain line\n";
  const std::string coloured = colour_report(report);
  EXPECT_NE(coloured.find("\x1b[32m fits\x1b[0m"), std::string::npos) << coloured;
  EXPECT_NE(coloured.find("\x1b[33m(low)\x1b[0m"), std::string::npos) << coloured;
  EXPECT_NE(coloured.find("\x1b[31mcannot run\x1b[0m"), std::string::npos) << coloured;
  EXPECT_NE(coloured.find("\x1b[31m(over)\x1b[0m"), std::string::npos) << coloured;
  EXPECT_NE(coloured.find("  \x1b[33m[memory.headroom_low]\x1b[0m only"), std::string::npos) << coloured;
  // Without its escapes the report is unchanged, line for line.
  EXPECT_EQ(std::regex_replace(coloured, std::regex("\x1b\\[[0-9]+m"), ""), report);
}

}  // namespace
}  // namespace engram
