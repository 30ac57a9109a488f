// `engramlab launch -n N [--job-id ID] -- CMD ARGS...`: N ranks of one job on
// this host, with the torchrun-style environment (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT=<free port>) plus a random
// ENGRAMLAB_JOB_TOKEN and ENGRAMLAB_JOB_ID. When one rank fails or dies, the
// others get a grace period to stop on their own, then SIGKILL.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "apps/command_registry.h"
#include "backends/ipc/job_token.h"
#include "backends/ipc/launch_env.h"

namespace engram::app {
namespace {

using Clock = std::chrono::steady_clock;

// Binds port 0 and reads back what the kernel chose. The port is free now;
// rank 0 binds it a moment later (SO_REUSEADDR on both sides).
int pick_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(sig);
    return "was killed by signal " + std::to_string(sig) + " (SIG" + (abbrev ? abbrev : "?") + ")";
  }
  return "stopped with wait status " + std::to_string(status);
}

bool succeeded(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

int launch(int ranks, std::string job_id, int grace_ms, const std::vector<std::string>& command) {
  if (ranks < 1) {
    std::fprintf(stderr, "engramlab launch: -n %d: need at least 1 rank\n", ranks);
    return 2;
  }
  if (command.empty()) {
    std::fprintf(stderr, "engramlab launch: no command after `--`: engramlab launch -n N -- CMD ARGS...\n");
    return 2;
  }
  if (job_id.empty()) job_id = "job-" + std::to_string(::getpid()) + "-" + std::to_string(::time(nullptr));
  if (Status s = ipc::check_job_id(job_id, "--job-id"); !s.is_ok()) {
    std::fprintf(stderr, "engramlab launch: %s\n", s.to_string().c_str());
    return 2;
  }
  auto token = ipc::random_job_token();
  if (!token.is_ok()) {
    std::fprintf(stderr, "engramlab launch: %s\n", token.status().to_string().c_str());
    return 1;
  }
  const int port = pick_free_port();
  if (port <= 0) {
    std::fprintf(stderr, "engramlab launch: no free TCP port on 127.0.0.1: %s\n", std::strerror(errno));
    return 1;
  }
  std::fprintf(stderr, "engramlab launch: job %s, %d ranks, rendezvous 127.0.0.1:%d\n", job_id.c_str(), ranks, port);
  std::fflush(stderr);

  std::vector<char*> argv;
  for (const auto& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);

  std::map<pid_t, int> rank_of;
  for (int rank = 0; rank < ranks; ++rank) {
    // Everything the child needs is built here, in the parent: after fork
    // the child only calls async-signal-safe functions (execvpe, write,
    // _exit), whatever threads the parent may have.
    const std::vector<std::pair<std::string, std::string>> ours = {
        {"RANK", std::to_string(rank)},          {"WORLD_SIZE", std::to_string(ranks)},
        {"LOCAL_RANK", std::to_string(rank)},    {"LOCAL_WORLD_SIZE", std::to_string(ranks)},
        {"MASTER_ADDR", "127.0.0.1"},            {"MASTER_PORT", std::to_string(port)},
        {"ENGRAMLAB_JOB_TOKEN", *token},         {"ENGRAMLAB_JOB_ID", job_id}};
    // Slurm variables of an enclosing allocation would contradict ours.
    const std::vector<std::string> dropped = {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"};
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      const std::string name = entry.substr(0, entry.find('='));
      bool replaced = std::find(dropped.begin(), dropped.end(), name) != dropped.end();
      for (const auto& [key, value] : ours) replaced |= key == name;
      if (!replaced) env_strings.push_back(entry);
    }
    for (const auto& [key, value] : ours) env_strings.push_back(key + "=" + value);
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const std::string exec_failed = "engramlab launch: rank " + std::to_string(rank) + ": cannot run " + argv[0] + "\n";

    const pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "engramlab launch: fork for rank %d failed: %s; stopping the others\n", rank, std::strerror(errno));
      for (auto& [p, r] : rank_of) ::kill(p, SIGKILL);
      for (auto& [p, r] : rank_of) ::waitpid(p, nullptr, 0);
      return 1;
    }
    if (pid == 0) {
      ::execvpe(argv[0], argv.data(), envp.data());
      const ssize_t ignored = ::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
      (void)ignored;
      ::_exit(127);
    }
    rank_of[pid] = rank;
  }

  int exit_code = 0;
  std::optional<Clock::time_point> kill_at;
  while (!rank_of.empty()) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, kill_at ? WNOHANG : 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;
    if (pid == 0) {
      if (Clock::now() >= *kill_at) {
        for (auto& [p, r] : rank_of) {
          std::fprintf(stderr, "engramlab launch: rank %d (pid %d) still running after the %d ms grace period: SIGKILL\n",
                       r, static_cast<int>(p), grace_ms);
          ::kill(p, SIGKILL);
        }
        kill_at = Clock::now() + std::chrono::hours(1);  // now just reap them
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    auto it = rank_of.find(pid);
    if (it == rank_of.end()) continue;
    const int rank = it->second;
    rank_of.erase(it);
    if (succeeded(status)) continue;
    std::fprintf(stderr, "engramlab launch: rank %d (pid %d) %s\n", rank, static_cast<int>(pid), describe_exit(status).c_str());
    if (exit_code == 0) {
      exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (!rank_of.empty()) {
        std::fprintf(stderr, "engramlab launch: giving the other %zu ranks %d ms to stop\n", rank_of.size(), grace_ms);
        kill_at = Clock::now() + std::chrono::milliseconds(grace_ms);
      }
    }
  }
  std::fflush(stderr);
  return exit_code;
}

const CommandRegistration registration("60-launch", [](CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("launch", "start N ranks of one job on this host (torchrun-style environment)");
  struct Options {
    int ranks = 1;
    std::string job_id;
    int grace_ms = 3000;
    std::vector<std::string> command;
  };
  auto options = std::make_shared<Options>();
  cmd->add_option("-n,--nproc", options->ranks, "number of ranks")->required();
  cmd->add_option("--job-id", options->job_id, "job id (names sockets and /dev/shm segments); default job-<pid>-<time>");
  cmd->add_option("--grace-ms", options->grace_ms, "after a rank fails, how long the others may take to stop");
  cmd->add_option("command", options->command, "the command each rank runs, after `--`")->required();
  cmd->callback([options, &exit_code] {
    exit_code = launch(options->ranks, options->job_id, options->grace_ms, options->command);
  });
});

}  // namespace
}  // namespace engram::app
