// Running a command line for the tests that drive real processes
// (engramlab launch, scenario run --real): its exit code, its output (stdout
// and stderr together) and how long it took.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <functional>
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

// As run(), but the command inherits stdin, stdout and stderr only: every
// other descriptor of this process (gtest's, ctest's, a CI runner's) is
// closed in the child before it starts. Tests that count file descriptors
// (an RLIMIT_NOFILE sweep) then mean the same number on every machine.
inline ProcessRun run_with_only_stdio(const std::string& command) {
  ProcessRun r;
  const auto start = std::chrono::steady_clock::now();
  int out[2];
  if (::pipe(out) != 0) return r;
  const pid_t child = ::fork();
  if (child < 0) {
    ::close(out[0]);
    ::close(out[1]);
    return r;
  }
  if (child == 0) {
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    if (::close_range(3, ~0U, 0) != 0) {
      for (int fd = 3; fd < 65536; ++fd) ::close(fd);
    }
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    r.output.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
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

// Runs `body` in a forked child (which may join a cgroup or a namespace of
// its own first) and gives back what it returned and the child's wait
// status: the child's text comes back through a pipe, and the child exits
// with _exit, never returning into the test.
struct ChildRun {
  int wait_status = -1;
  std::string said;
};

inline ChildRun run_in_child(const std::function<std::string()>& body) {
  ChildRun r;
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return r;
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_fds[0]);
    const std::string said = body();
    const bool written = ::write(pipe_fds[1], said.data(), said.size()) == static_cast<ssize_t>(said.size());
    ::_exit(written ? 0 : 91);
  }
  ::close(pipe_fds[1]);
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) r.said.append(buffer, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  if (child > 0) ::waitpid(child, &r.wait_status, 0);
  return r;
}

}  // namespace engram::testing
