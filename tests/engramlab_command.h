// Command tests run the built `engramlab` binary through the shell: one way
// to start it and collect what it printed (stderr folded into stdout) and
// its exit code.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace engram::testing {

struct CommandOutput {
  int exit_code = -1;  // -1: it did not exit normally (or could not start)
  std::string text;
};

inline std::string engramlab_path() { return std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab"; }

// `prefix` goes before the binary (e.g. "env -u RANK"); `args` after it.
// `stdout_to` (e.g. ">/dev/full") sends stdout elsewhere after stderr was
// folded into what is read, so only stderr is read then.
inline CommandOutput run_engramlab(const std::string& args, const std::string& prefix = "",
                                   const std::string& stdout_to = "") {
  const std::string cmd = prefix + (prefix.empty() ? "" : " ") + engramlab_path() + " " + args + " 2>&1" +
                          (stdout_to.empty() ? "" : " " + stdout_to);
  CommandOutput out;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.text.append(buffer, n);
  const int status = ::pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// A rank's command run with no GPU and no launcher variables, whatever this
// machine has, so the outcome is the same everywhere.
inline CommandOutput run_engramlab_without_gpu(const std::string& args) {
  return run_engramlab(args, "env -u RANK -u WORLD_SIZE CUDA_VISIBLE_DEVICES=");
}

// The arguments that start `engramlab <command_and_args>` as one rank under
// `engramlab launch`.
inline std::string launch_one_rank(const std::string& command_and_args) {
  return "launch -n 1 -- " + engramlab_path() + " " + command_and_args;
}

}  // namespace engram::testing
