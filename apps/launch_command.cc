// `engramlab launch`: the ranks of one job on this host, as torchrun starts
// them, for one node or one node of many:
//
//   engramlab launch --nproc-per-node 8 -- CMD ARGS...                  (one host)
//   engramlab launch --nnodes 2 --node-rank 0 --master-addr node0
//       --nproc-per-node 8 -- CMD ARGS...          (node 0 of 2; one command line)
//
// Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK,
// MASTER_ADDR, MASTER_PORT, ENGRAMLAB_JOB_TOKEN and ENGRAMLAB_JOB_ID. On one
// host the launcher makes the token; across nodes every node's launcher needs
// the same ENGRAMLAB_JOB_TOKEN, set once by the user.
//
// Like torchrun and srun: each output line is prefixed with its rank
// ("[rank 3] ...", --no-rank-prefix turns it off); SIGINT, SIGTERM and SIGHUP
// are forwarded to every rank, which get --grace-ms to stop before SIGKILL;
// when one rank fails the others get the same grace, then SIGKILL; and the
// ranks die with the launcher even when it is SIGKILLed itself (they hold
// PR_SET_PDEATHSIG). Exit status: the first failing rank's (128 + signal when
// it was killed), or 128 + the signal the launcher got.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "apps/command_registry.h"
#include "apps/flag_numbers.h"
#include "backends/ipc/job_token.h"
#include "backends/ipc/launch_env.h"
#include "backends/ipc/socket_dir.h"

namespace engram::app {
namespace {

using Clock = std::chrono::steady_clock;

struct LaunchOptions {
  // The numbers as typed; check_options reads them into the fields below.
  std::string nproc_per_node_text = "1", nnodes_text = "1", node_rank_text = "0", master_port_text = "0",
              grace_ms_text = "3000";
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;  // empty: 127.0.0.1 on one node; required on several
  int master_port = 0;      // 0: a free port on one node; 29500 on several
  std::string job_id;
  int grace_ms = 3000;
  bool no_rank_prefix = false;
  std::vector<std::string> command;
};

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

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own output is gone: nothing better to do
    done += static_cast<size_t>(n);
  }
}

// Signals the launcher got, for the main loop (a handler may only write).
int g_signal_pipe[2] = {-1, -1};
void on_signal(int sig) {
  const unsigned char byte = static_cast<unsigned char>(sig);
  const int saved = errno;
  const ssize_t ignored = ::write(g_signal_pipe[1], &byte, 1);
  (void)ignored;
  errno = saved;
}

// One rank's stdout or stderr, read through a pipe and written on with the
// rank's prefix, whole lines at a time.
struct OutputPipe {
  int fd = -1;
  int to = STDOUT_FILENO;
  std::string prefix;
  std::string partial;
};

void relay(OutputPipe& p, bool at_eof) {
  char buf[8192];
  for (;;) {
    const ssize_t n = at_eof ? 0 : ::read(p.fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) {
      p.partial.append(buf, static_cast<size_t>(n));
      std::string out;
      size_t start = 0;
      for (size_t nl = p.partial.find('\n'); nl != std::string::npos; nl = p.partial.find('\n', start)) {
        out += p.prefix + p.partial.substr(start, nl - start + 1);
        start = nl + 1;
      }
      p.partial.erase(0, start);
      write_all(p.to, out);
      return;
    }
    // EOF (or an error, which ends the stream the same way).
    if (!p.partial.empty()) write_all(p.to, p.prefix + p.partial + "\n");
    p.partial.clear();
    ::close(p.fd);
    p.fd = -1;
    return;
  }
}

constexpr int kMaxRanksPerNode = 4096;
constexpr int kMaxNodes = 65536;
constexpr int kMaxGraceMs = 3600 * 1000;

Status check_options(LaunchOptions& o) {
  // Numbers in range, read and worded as every command does.
  ENGRAM_ASSIGN_OR_RETURN(o.nproc_per_node,
                          whole_number_flag<int>("--nproc-per-node", o.nproc_per_node_text, 1, kMaxRanksPerNode));
  ENGRAM_ASSIGN_OR_RETURN(o.nnodes, whole_number_flag<int>("--nnodes", o.nnodes_text, 1, kMaxNodes));
  ENGRAM_ASSIGN_OR_RETURN(o.node_rank, whole_number_flag<int>("--node-rank", o.node_rank_text, 0, kMaxNodes - 1));
  ENGRAM_ASSIGN_OR_RETURN(o.master_port, whole_number_flag<int>("--master-port", o.master_port_text, 0, 65535));
  ENGRAM_ASSIGN_OR_RETURN(o.grace_ms, whole_number_flag<int>("--grace-ms", o.grace_ms_text, 0, kMaxGraceMs));
  if (o.node_rank >= o.nnodes) {
    return invalid_argument("--node-rank " + std::to_string(o.node_rank) + ": nodes are 0.." +
                            std::to_string(o.nnodes - 1) + " for --nnodes " + std::to_string(o.nnodes));
  }
  if (static_cast<int64_t>(o.nnodes) * o.nproc_per_node > (1 << 20))
    return invalid_argument("--nnodes x --nproc-per-node is too many ranks");
  if (o.command.empty())
    return invalid_argument("no command after `--`: engramlab launch --nproc-per-node N -- CMD ARGS...");
  if (o.nnodes > 1 && o.master_addr.empty()) {
    return invalid_argument("--nnodes " + std::to_string(o.nnodes) +
                            " needs --master-addr: the address of node 0, where rank 0 listens (the same on every node)");
  }
  return Status::ok();
}

// Every rank is gone. Ranks remove their sockets and the job's directory
// as they leave; a killed one cannot, so what it left goes now.
void remove_socket_dir_of_ended_job(const std::string& job_id) {
  const char* explicit_dir = std::getenv("ENGRAMLAB_SOCKET_DIR");
  if (explicit_dir != nullptr && explicit_dir[0] != '\0') {
    ipc::remove_dead_rank_sockets(explicit_dir);
    ::rmdir(explicit_dir);  // only when empty
    return;
  }
  const std::string root = ipc::default_socket_root();
  auto swept = ipc::sweep_stale_socket_dirs(root, job_id);
  if (!swept.is_ok()) {
    std::fprintf(stderr, "engramlab launch: could not sweep the job's socket directory under %s: %s\n", root.c_str(),
                 swept.status().to_string().c_str());
  }
}

int launch(LaunchOptions o) {
  if (Status s = check_options(o); !s.is_ok()) {
    std::fprintf(stderr, "engramlab launch: %s\n", s.message().c_str());
    return 2;
  }
  const int world = o.nnodes * o.nproc_per_node;
  const int first_rank = o.node_rank * o.nproc_per_node;
  if (o.master_addr.empty()) o.master_addr = "127.0.0.1";

  // The token: the user's when set (needed across nodes), else made here.
  std::string token;
  if (const char* given = std::getenv("ENGRAMLAB_JOB_TOKEN"); given != nullptr && *given != '\0') {
    token = given;
  } else if (o.nnodes > 1) {
    std::fprintf(stderr,
                 "engramlab launch: --nnodes %d: every node's launcher needs the same ENGRAMLAB_JOB_TOKEN; set it once "
                 "and start each node's launcher with it:\n  %s\n",
                 o.nnodes, ipc::kJobTokenLine);
    return 2;
  } else {
    auto made = ipc::random_job_token();
    if (!made.is_ok()) {
      std::fprintf(stderr, "engramlab launch: %s\n", made.status().to_string().c_str());
      return 1;
    }
    token = *made;
  }

  int port = o.master_port;
  if (port == 0 && o.nnodes > 1) port = 29500;  // torchrun's default
  if (port == 0) {
    port = pick_free_port();
    if (port <= 0) {
      std::fprintf(stderr, "engramlab launch: no free TCP port on 127.0.0.1: %s\n", std::strerror(errno));
      return 1;
    }
  }
  if (o.job_id.empty()) {
    if (const char* given = std::getenv("ENGRAMLAB_JOB_ID"); given != nullptr && *given != '\0') o.job_id = given;
  }
  if (o.job_id.empty()) {
    // Every node must name the job alike: derive it from what they share.
    o.job_id = o.nnodes > 1 ? "launch-" + ipc::job_id_part(o.master_addr) + "-" + std::to_string(port)
                            : "job-" + std::to_string(::getpid()) + "-" + std::to_string(::time(nullptr));
  }
  if (Status s = ipc::check_job_id(o.job_id, "--job-id"); !s.is_ok()) {
    std::fprintf(stderr, "engramlab launch: %s\n", s.to_string().c_str());
    return 2;
  }
  std::fprintf(stderr, "engramlab launch: job %s, node %d of %d, ranks %d-%d of %d, rendezvous %s:%d\n",
               o.job_id.c_str(), o.node_rank, o.nnodes, first_rank, first_rank + o.nproc_per_node - 1, world,
               o.master_addr.c_str(), port);
  std::fflush(stderr);

  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    std::fprintf(stderr, "engramlab launch: pipe: %s\n", std::strerror(errno));
    return 1;
  }
  struct sigaction action{};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &action, nullptr);

  std::vector<char*> argv;
  for (const auto& arg : o.command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);

  // Variables of other launchers would describe another job, or (torchrun's)
  // move the rendezvous port: ours replace them.
  const std::vector<std::string> dropped_prefixes = {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                                                     "OMPI_COMM_WORLD_", "TORCHELASTIC_", "ENGRAMLAB_MASTER_PORT",
                                                     "GROUP_RANK"};
  const pid_t launcher_pid = ::getpid();
  pid_t group = 0;
  std::map<pid_t, int> rank_of;
  std::vector<OutputPipe> pipes;
  auto stop_all = [&](int sig) {
    if (group > 0) ::kill(-group, sig);
    for (auto& [p, r] : rank_of) ::kill(p, sig);
  };
  for (int local = 0; local < o.nproc_per_node; ++local) {
    const int rank = first_rank + local;
    // Everything the child needs is built here, in the parent: after fork
    // the child only calls async-signal-safe functions.
    const std::vector<std::pair<std::string, std::string>> ours = {
        {"RANK", std::to_string(rank)},
        {"WORLD_SIZE", std::to_string(world)},
        {"LOCAL_RANK", std::to_string(local)},
        {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
        {"NODE_RANK", std::to_string(o.node_rank)},
        {"MASTER_ADDR", o.master_addr},
        {"MASTER_PORT", std::to_string(port)},
        {"ENGRAMLAB_JOB_TOKEN", token},
        {"ENGRAMLAB_JOB_ID", o.job_id}};
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      const std::string name = entry.substr(0, entry.find('='));
      bool replaced = false;
      for (const std::string& prefix : dropped_prefixes) replaced |= name.rfind(prefix, 0) == 0;
      for (const auto& [key, value] : ours) replaced |= key == name;
      if (!replaced) env_strings.push_back(entry);
    }
    for (const auto& [key, value] : ours) env_strings.push_back(key + "=" + value);
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const std::string exec_failed = "engramlab launch: rank " + std::to_string(rank) + ": cannot run " + argv[0] + ": ";

    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    if (!o.no_rank_prefix && (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)) {
      std::fprintf(stderr, "engramlab launch: pipe for rank %d: %s; stopping the others\n", rank, std::strerror(errno));
      stop_all(SIGKILL);
      for (auto& [p, r] : rank_of) ::waitpid(p, nullptr, 0);
      return 1;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "engramlab launch: fork for rank %d failed: %s; stopping the others\n", rank,
                   std::strerror(errno));
      stop_all(SIGKILL);
      for (auto& [p, r] : rank_of) ::waitpid(p, nullptr, 0);
      return 1;
    }
    if (pid == 0) {
      // Die with the launcher, even a SIGKILLed one; if it is already gone, stop.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher_pid) ::_exit(1);
      // One process group for the job's ranks: the terminal's Ctrl-C reaches
      // the launcher alone, which forwards it once.
      ::setpgid(0, group);
      if (out_pipe[1] >= 0) {
        ::dup2(out_pipe[1], STDOUT_FILENO);
        ::dup2(err_pipe[1], STDERR_FILENO);
      }
      ::execvpe(argv[0], argv.data(), envp.data());
      const char* why = std::strerror(errno);
      ssize_t ignored = ::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
      ignored = ::write(STDERR_FILENO, why, std::strlen(why));
      ignored = ::write(STDERR_FILENO, "\n", 1);
      (void)ignored;
      ::_exit(127);
    }
    if (group == 0) group = pid;
    ::setpgid(pid, group);  // also here: whichever runs first makes it so
    rank_of[pid] = rank;
    if (out_pipe[0] >= 0) {
      ::close(out_pipe[1]);
      ::close(err_pipe[1]);
      const std::string prefix = "[rank " + std::to_string(rank) + "] ";
      pipes.push_back({out_pipe[0], STDOUT_FILENO, prefix, {}});
      pipes.push_back({err_pipe[0], STDERR_FILENO, prefix, {}});
    }
  }

  int exit_code = 0;
  std::optional<Clock::time_point> kill_at;
  bool killed = false;
  int forwarded = 0;
  std::optional<Clock::time_point> drain_until;
  for (;;) {
    const bool pipes_open = std::any_of(pipes.begin(), pipes.end(), [](const OutputPipe& p) { return p.fd >= 0; });
    if (rank_of.empty() && (!pipes_open || (drain_until && Clock::now() >= *drain_until))) break;
    if (rank_of.empty() && !drain_until) drain_until = Clock::now() + std::chrono::milliseconds(500);

    std::vector<pollfd> fds;
    fds.push_back({g_signal_pipe[0], POLLIN, 0});
    std::vector<size_t> pipe_of;
    for (size_t i = 0; i < pipes.size(); ++i) {
      if (pipes[i].fd < 0) continue;
      fds.push_back({pipes[i].fd, POLLIN, 0});
      pipe_of.push_back(i);
    }
    ::poll(fds.data(), fds.size(), 50);

    // Signals to the launcher go to every rank.
    unsigned char sig = 0;
    while (::read(g_signal_pipe[0], &sig, 1) == 1) {
      const char* abbrev = sigabbrev_np(sig);
      std::fprintf(stderr, "engramlab launch: got SIG%s: forwarding it to the %zu running ranks%s\n",
                   abbrev ? abbrev : "?", rank_of.size(),
                   forwarded == 0 ? (", SIGKILL after " + std::to_string(o.grace_ms) + " ms").c_str() : "");
      stop_all(sig);
      if (forwarded++ == 0) {
        if (exit_code == 0) exit_code = 128 + sig;
        if (!kill_at) kill_at = Clock::now() + std::chrono::milliseconds(o.grace_ms);
      }
    }
    for (size_t k = 1; k < fds.size(); ++k) {
      if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) relay(pipes[pipe_of[k - 1]], false);
    }

    // Reap.
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      auto it = rank_of.find(pid);
      if (it == rank_of.end()) continue;
      const int rank = it->second;
      rank_of.erase(it);
      if (succeeded(status)) continue;
      std::fprintf(stderr, "engramlab launch: rank %d (pid %d) %s\n", rank, static_cast<int>(pid),
                   describe_exit(status).c_str());
      if (exit_code == 0) {
        exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (!rank_of.empty() && !kill_at) {
          std::fprintf(stderr, "engramlab launch: giving the other %zu ranks %d ms to stop\n", rank_of.size(),
                       o.grace_ms);
          kill_at = Clock::now() + std::chrono::milliseconds(o.grace_ms);
        }
      }
    }
    if (kill_at && !killed && Clock::now() >= *kill_at && !rank_of.empty()) {
      for (auto& [p, r] : rank_of) {
        std::fprintf(stderr, "engramlab launch: rank %d (pid %d) still running after the %d ms grace period: SIGKILL\n",
                     r, static_cast<int>(p), o.grace_ms);
      }
      stop_all(SIGKILL);
      killed = true;
    }
  }
  for (OutputPipe& p : pipes)
    if (p.fd >= 0) relay(p, true);
  remove_socket_dir_of_ended_job(o.job_id);
  std::fflush(stderr);
  return exit_code;
}

const CommandRegistration registration("60-launch", [](CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "launch", "Start the ranks of one job on this host, one node or one node of many (torchrun's flags and "
                "environment; output prefixed by rank; signals forwarded)");
  auto o = std::make_shared<LaunchOptions>();
  cmd->add_option("-n,--nproc,--nproc-per-node", o->nproc_per_node_text, "ranks on this node")->required();
  cmd->add_option("--nnodes", o->nnodes_text, "nodes in the job (default 1)");
  cmd->add_option("--node-rank", o->node_rank_text, "this node's index, 0..nnodes-1 (default 0)");
  cmd->add_option("--master-addr", o->master_addr,
                  "address of node 0, where rank 0 listens (default 127.0.0.1; required with --nnodes > 1)");
  cmd->add_option("--master-port", o->master_port_text,
                  "rendezvous port on node 0 (default: a free port on one node, 29500 on several)");
  cmd->add_option("--job-id", o->job_id,
                  "job id (names sockets and /dev/shm segments); default ENGRAMLAB_JOB_ID, else job-<pid>-<time> on "
                  "one node, launch-<master addr>-<port> on several");
  cmd->add_option("--grace-ms", o->grace_ms_text, "after a rank fails or a signal arrives, how long the ranks may take "
                                             "to stop before SIGKILL (default 3000)");
  cmd->add_flag("--no-rank-prefix", o->no_rank_prefix, "pass the ranks' output through as is, without [rank N]");
  cmd->add_option("command", o->command, "the command each rank runs, after `--`")->required();
  cmd->footer(std::string("Across nodes, set the job token once, before starting every node's launcher:\n  ") +
              ipc::kJobTokenLine + "\n");
  cmd->callback([o, &exit_code] { exit_code = launch(*o); });
});

}  // namespace
}  // namespace engram::app
