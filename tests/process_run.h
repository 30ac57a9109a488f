// Running a command line for the tests that drive real processes
// (engramlab launch, scenario run --real): its exit code, its output (stdout
// and stderr together) and how long it took.
#pragma once

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace engram::testing {

struct ProcessRun {
  int exit_code = -1;
  std::string output;
  std::chrono::milliseconds took{0};
};

inline ProcessRun run(const std::string& command) {
  ProcessRun r;
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  char buf[4096];
  while (pipe != nullptr && std::fgets(buf, sizeof(buf), pipe) != nullptr) r.output += buf;
  const int status = pipe != nullptr ? ::pclose(pipe) : -1;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  return r;
}

// How many times `what` occurs in `text`, overlaps included.
inline size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace engram::testing
