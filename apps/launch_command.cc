// `engramlab launch`: the ranks of one job on this host, as torchrun starts
// them, for one node or one node of many:
//
//   engramlab launch --nproc-per-node 8 -- CMD ARGS...                  (one host)
//   engramlab launch --nnodes 2 --node-rank 0 --master-addr node0
//       --nproc-per-node 8 -- CMD ARGS...          (node 0 of 2; one command line)
//
// torchrun's spellings are taken too: --nproc_per_node, --node_rank,
// --master_addr, --master_port, --standalone, and --nproc-per-node gpu, auto
// or cpu (apps/local_world_size.h).
//
// Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK,
// MASTER_ADDR, MASTER_PORT, ENGRAMLAB_JOB_TOKEN and ENGRAMLAB_JOB_ID. On one
// host the launcher makes the token; across nodes every node's launcher needs
// the same ENGRAMLAB_JOB_TOKEN, set once by the user.
//
// Like torchrun and srun: each output line is prefixed with its rank
// ("[rank 3] ...", --no-rank-prefix turns it off); SIGINT, SIGTERM and SIGHUP
// are forwarded to every rank, which get --grace-ms to stop before SIGKILL;
// when one rank fails the others get the same grace, then SIGKILL. The ranks
// and whatever they start share one process group, which the launcher ends
// whole when the job ends; when the launcher itself dies (even by SIGKILL)
// the ranks get SIGTERM (PR_SET_PDEATHSIG) to tear down, and a guard process
// kills what is left of the group within a second (apps/launch_guard.h).
// Exit status: the first failing rank's (128 + signal when it was killed), or
// 128 + the signal the launcher got.
//
// --engine NAME and --file deployment.yaml (apps/launch_plan.h): the job's
// engine, handed to every rank as ENGRAMLAB_ENGINE, and the file planned
// under it before any rank starts (exit 2 where the engine refuses it).
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "apps/command_registry.h"
#include "apps/emulated_driver_launch.h"
#include "apps/flag_numbers.h"
#include "apps/flag_spellings.h"
#include "apps/local_world_size.h"
#include "apps/launch_guard.h"
#include "apps/launch_plan.h"
#include "backends/ipc/fd_limit.h"
#include "backends/ipc/job_token.h"
#include "backends/ipc/launch_env.h"
#include "backends/ipc/socket_dir.h"
#include "apps/engine_choice.h"
#include "core/engines/engine_profile.h"

namespace engram::app {
namespace {

using Clock = std::chrono::steady_clock;

struct LaunchOptions {
  // The numbers as typed; check_options reads them into the fields below.
  // nproc_per_node_text: empty when not given (it must be).
  std::string nproc_per_node_text, nnodes_text = "1", node_rank_text = "0", master_port_text = "0",
              grace_ms_text = "3000";
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;  // empty: 127.0.0.1 on one node; required on several
  int master_port = 0;      // 0: a free port on one node; 29500 on several
  std::string job_id;
  int grace_ms = 3000;
  bool no_rank_prefix = false;
  bool standalone = false;  // torchrun's: one node, rendezvous on this host at a free port
  bool master_given = false;  // --master-addr or --master-port given
  // Removed when the job ends if the launcher's parent has died by then:
  // `scenario run --real` passes its result directory, which it cannot remove
  // once it is killed itself.
  std::string remove_with_parent;
  std::string engine;  // --engine: "" not given
  std::string file;    // --file: a deployment planned before any rank starts
  std::string emulate_driver;  // --emulate-driver: the deployment whose world the ranks emulate
  std::string emulated_world;  // --emulated-world: a world file written by `scenario run --real --emulate-driver`
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

// False when the stream is gone (a closed pipe: EPIPE, SIGPIPE being
// ignored) or failing; the caller stops writing to it.
bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
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

// The launcher's stdout or stderr. Once a write to it fails (`launch ... |
// head` closed it) nothing more is written there; the ranks' output for it
// is read and dropped, so they run to their end instead of blocking.
struct Destination {
  int fd = STDOUT_FILENO;
  const char* name = "stdout";
  bool closed = false;
};

void write_to(Destination& d, const std::string& text) {
  if (d.closed || text.empty() || write_all(d.fd, text)) return;
  d.closed = true;
  const int err = errno;
  if (d.fd != STDERR_FILENO) {
    std::fprintf(stderr, "engramlab launch: writing to %s failed (%s): no longer relaying the ranks' %s; they run on\n",
                 d.name, std::strerror(err), d.name);
  }
}

// A line longer than this (a progress bar redrawn with \r never ends one)
// is written on in pieces, so a rank cannot make the launcher hold or
// search an unbounded line.
constexpr size_t kMaxPartialLineBytes = size_t{64} << 10;

// One rank's stdout or stderr, read through a pipe and written on with the
// rank's prefix, whole lines at a time.
struct OutputPipe {
  int fd = -1;
  Destination* to = nullptr;
  std::string prefix;
  std::string partial;  // holds no newline
};

void relay(OutputPipe& p, bool at_eof) {
  char buf[8192];
  for (;;) {
    const ssize_t n = at_eof ? 0 : ::read(p.fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) {
      if (p.to->closed) return;  // read and dropped
      // Only the new bytes are searched: what was held has no newline.
      const size_t held = p.partial.size();
      p.partial.append(buf, static_cast<size_t>(n));
      std::string out;
      size_t start = 0;
      for (size_t nl = p.partial.find('\n', held); nl != std::string::npos; nl = p.partial.find('\n', start)) {
        out += p.prefix;
        out.append(p.partial, start, nl - start + 1);
        start = nl + 1;
      }
      p.partial.erase(0, start);
      if (p.partial.size() >= kMaxPartialLineBytes) {
        out += p.prefix + p.partial + "\n";
        p.partial.clear();
      }
      write_to(*p.to, out);
      return;
    }
    // EOF (or an error, which ends the stream the same way).
    if (!p.partial.empty()) write_to(*p.to, p.prefix + p.partial + "\n");
    p.partial.clear();
    ::close(p.fd);
    p.fd = -1;
    return;
  }
}

// True when a read of `fd` would return at once with data or EOF.
bool pipe_has_data(int fd) {
  pollfd one{fd, POLLIN, 0};
  return ::poll(&one, 1, 0) == 1 && (one.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

constexpr int kMaxRanksPerNode = 4096;
constexpr int kMaxNodes = 65536;
constexpr int kMaxGraceMs = 3600 * 1000;

Status check_options(LaunchOptions& o) {
  if (o.nproc_per_node_text.empty()) {
    return invalid_argument(
        "how many ranks to start on this node is missing: give --nproc-per-node N (also spelled -n, --nproc, or "
        "--nproc_per_node as torchrun writes it; N a number, or gpu, auto or cpu)");
  }
  // Numbers in range, read and worded as every command does.
  ENGRAM_ASSIGN_OR_RETURN(o.nproc_per_node, local_world_size(o.nproc_per_node_text, "--nproc-per-node", kMaxRanksPerNode));
  if (o.standalone && (o.nnodes_text != "1" || o.master_given)) {
    return invalid_argument("--standalone: one node, its rendezvous on 127.0.0.1 at a free port (as torchrun's); "
                            "leave out --nnodes, --master-addr and --master-port, or drop --standalone");
  }
  if (o.nnodes_text.find(':') != std::string::npos) {
    return invalid_argument("--nnodes " + o.nnodes_text + ": an elastic MIN:MAX range (torchrun's) is not "
                            "supported; give the number of nodes, e.g. --nnodes 2");
  }
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
  if (!o.master_addr.empty()) ENGRAM_RETURN_IF_ERROR(ipc::check_master_addr(o.master_addr, "--master-addr"));
  if (o.nnodes > 1 && o.master_addr.empty()) {
    return invalid_argument("--nnodes " + std::to_string(o.nnodes) +
                            " needs --master-addr: the address of node 0, where rank 0 listens (the same on every node)");
  }
  if (!o.remove_with_parent.empty()) {
    const std::filesystem::path dir(o.remove_with_parent);
    struct stat st{};
    if (!dir.is_absolute() || dir.filename().string().rfind("engramlab-", 0) != 0 ||
        ::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
      return invalid_argument("--remove-with-parent " + o.remove_with_parent +
                              ": must be an absolute path to a directory of ours named engramlab-*, not a link (it is "
                              "removed whole)");
    }
  }
  return Status::ok();
}

// Dead, a zombie nobody has reaped yet included (kill(0) still answers for one).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && (line[close + 2] == 'Z' || line[close + 2] == 'X');
}

// The directory --remove-with-parent names, once the process that started
// the launcher (pid `parent`) is gone: nobody else will remove it.
void remove_dir_of_dead_parent(const std::string& dir, pid_t parent) {
  if (dir.empty() || !process_gone(parent)) return;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// Every rank is gone. Ranks remove their sockets and the job's directory
// as they leave; a killed one cannot, so what it left goes now.
// A user's ENGRAMLAB_SOCKET_DIR that was there before the job stays.
void remove_socket_dir_of_ended_job(const std::string& job_id, bool explicit_dir_was_there) {
  const char* explicit_dir = std::getenv("ENGRAMLAB_SOCKET_DIR");
  if (explicit_dir != nullptr && explicit_dir[0] != '\0') {
    // Only what engramlab made; a user's directory that was there before stays.
    if (explicit_dir_was_there) ipc::remove_dead_rank_sockets(explicit_dir);
    else ipc::remove_ended_job_dir(explicit_dir);
    return;
  }
  const std::string root = ipc::default_socket_root();
  auto swept = ipc::sweep_stale_socket_dirs(root, job_id);
  if (!swept.is_ok()) {
    std::fprintf(stderr, "engramlab launch: could not sweep the job's socket directory under %s: %s\n", root.c_str(),
                 swept.status().to_string().c_str());
  }
}

// Each step below either lets the launch go on (nullopt) or ends it with
// the exit code it returns, having said why on stderr.
using Stop = std::optional<int>;

// The token: the user's when set (needed across nodes), else made here.
Stop choose_token(const LaunchOptions& o, std::string& token) {
  if (const char* given = std::getenv("ENGRAMLAB_JOB_TOKEN"); given != nullptr && *given != '\0') {
    token = given;
    // Refused here, naming the variable, rather than by every rank later.
    if (Status s = ipc::check_job_token(token); !s.is_ok()) {
      std::fprintf(stderr, "engramlab launch: %s\n", s.message().c_str());
      return 2;
    }
    return std::nullopt;
  }
  if (o.nnodes > 1) {
    std::fprintf(stderr,
                 "engramlab launch: --nnodes %d: every node's launcher needs the same ENGRAMLAB_JOB_TOKEN; set it once "
                 "and start each node's launcher with it:\n  %s\n",
                 o.nnodes, ipc::kJobTokenLine);
    return 2;
  }
  auto made = ipc::random_job_token();
  if (!made.is_ok()) {
    std::fprintf(stderr, "engramlab launch: %s\n", made.status().to_string().c_str());
    return 1;
  }
  token = *made;
  return std::nullopt;
}

// The rendezvous port: as given; torchrun's default across nodes; a free
// one on one node.
Stop choose_port(const LaunchOptions& o, int& port) {
  port = o.master_port;
  if (port == 0 && o.nnodes > 1) port = 29500;  // torchrun's default
  if (port == 0) {
    port = pick_free_port();
    if (port <= 0) {
      std::fprintf(stderr, "engramlab launch: no free TCP port on 127.0.0.1: %s\n", std::strerror(errno));
      return 1;
    }
  }
  return std::nullopt;
}

// The job id: --job-id, else ENGRAMLAB_JOB_ID, else one derived here.
Stop name_job(LaunchOptions& o, int port) {
  bool job_id_from_env = false;
  if (o.job_id.empty()) {
    if (const char* given = std::getenv("ENGRAMLAB_JOB_ID"); given != nullptr && *given != '\0') {
      o.job_id = given;
      job_id_from_env = true;
    }
  }
  if (o.job_id.empty()) {
    // Every node must name the job alike: derive it from what they share.
    o.job_id = o.nnodes > 1 ? "launch-" + ipc::job_id_part(o.master_addr) + "-" + std::to_string(port)
                            : "job-" + std::to_string(::getpid()) + "-" + std::to_string(::time(nullptr));
  }
  if (Status s = ipc::check_job_id(o.job_id, job_id_from_env ? "ENGRAMLAB_JOB_ID" : "--job-id"); !s.is_ok()) {
    std::fprintf(stderr, "engramlab launch: %s\n", s.to_string().c_str());
    return 2;
  }
  return std::nullopt;
}

// The fds the relay needs, the signal pipe and the launcher's handlers.
Stop prepare_signals_and_relay(const LaunchOptions& o) {
  // Two pipes per rank (its stdout and stderr), the signal pipe and the guard's.
  if (Status s = ipc::check_fds_available(
          (o.no_rank_prefix ? 0 : 4 * static_cast<uint64_t>(o.nproc_per_node)) + 4,
          fmt::format("engramlab launch, relaying the output of {} ranks through two pipes each", o.nproc_per_node));
      !s.is_ok()) {
    std::fprintf(stderr, "engramlab launch: %s (or --no-rank-prefix, which needs no pipes)\n", s.message().c_str());
    return 1;
  }
  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    std::fprintf(stderr, "engramlab launch: pipe: %s\n", std::strerror(errno));
    return 1;
  }
  struct sigaction action{};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &action, nullptr);
  // A starter may hand these over blocked (`scenario run --real` does, so a
  // SIGTERM from its death, PR_SET_PDEATHSIG, cannot end this launcher before
  // it can remove --remove-with-parent): a signal held meanwhile is handled
  // now, and the ranks start unblocked.
  sigset_t stops;
  sigemptyset(&stops);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stops, sig);
  ::sigprocmask(SIG_UNBLOCK, &stops, nullptr);
  // A closed stdout (`launch ... | head`) must not kill the launcher, and
  // with it every rank: writes fail with EPIPE and the relay stops instead.
  // The ranks get the default back before exec.
  ::signal(SIGPIPE, SIG_IGN);
  return std::nullopt;
}

// What every rank of this node shares.
struct NodeJob {
  std::string engine;  // every rank's ENGRAMLAB_ENGINE; "": left as the launcher's environment has it
  int world = 1;
  int first_rank = 0;
  int port = 0;
  std::string token;
  bool socket_dir_was_there = false;
  pid_t launcher_pid = 0;
  std::optional<EmulatedDriverJob> emulated;  // --emulate-driver
};

// Variables of other launchers would describe another job, or (torchrun's)
// move the rendezvous port: ours replace them.
const std::vector<std::string> kDroppedEnvPrefixes = {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                                                      "OMPI_COMM_WORLD_", "TORCHELASTIC_", "ENGRAMLAB_MASTER_PORT",
                                                      "GROUP_RANK"};

// The environment of the rank `local` of this node: the launcher's, less
// other launchers' variables, plus ours.
std::vector<std::string> rank_environment(const LaunchOptions& o, const NodeJob& job, int local) {
  const int rank = job.first_rank + local;
  const std::vector<std::pair<std::string, std::string>> ours = {
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(job.world)},
      {"LOCAL_RANK", std::to_string(local)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"NODE_RANK", std::to_string(o.node_rank)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(job.port)},
      {"ENGRAMLAB_JOB_TOKEN", job.token},
      {"ENGRAMLAB_JOB_ID", o.job_id},
      {"ENGRAMLAB_SOCKET_DIR_KEEP", job.socket_dir_was_there ? "1" : "0"}};
  std::vector<std::pair<std::string, std::string>> handed = ours;
  if (!job.engine.empty()) handed.push_back({kEngineEnv, job.engine});
  if (job.emulated) {
    // The emulated host's local rank replaces this node's.
    for (auto& [key, value] : emulated_driver_environment(*job.emulated, rank)) {
      std::erase_if(handed, [&key](const auto& kv) { return kv.first == key; });
      handed.push_back({key, value});
    }
  }
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& prefix : kDroppedEnvPrefixes) replaced |= name.rfind(prefix, 0) == 0;
    for (const auto& [key, value] : handed) replaced |= key == name;
    if (!replaced) env_strings.push_back(entry);
  }
  for (const auto& [key, value] : handed) env_strings.push_back(key + "=" + value);
  return env_strings;
}

// The ranks started so far: their process group, pids and output pipes.
struct RankProcesses {
  pid_t group = 0;
  std::map<pid_t, int> rank_of;
  std::vector<OutputPipe> pipes;

  void stop_all(int sig) {
    if (group > 0) ::kill(-group, sig);
    for (auto& [p, r] : rank_of) ::kill(p, sig);
  }
  // A rank could not be started: the others are killed and reaped.
  int abandon() {
    stop_all(SIGKILL);
    for (auto& [p, r] : rank_of) ::waitpid(p, nullptr, 0);
    return 1;
  }
};

// Forks and execs rank `local` of this node into the job's process group,
// its output through two pipes unless --no-rank-prefix.
Stop start_rank(const LaunchOptions& o, const NodeJob& job, int local, const std::vector<char*>& argv,
                Destination& out_dest, Destination& err_dest, RankProcesses& ranks) {
  const int rank = job.first_rank + local;
  // Everything the child needs is built here, in the parent: after fork
  // the child only calls async-signal-safe functions.
  std::vector<std::string> env_strings = rank_environment(o, job, local);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string exec_failed = "engramlab launch: rank " + std::to_string(rank) + ": cannot run " + argv[0] + ": ";
  const pid_t launcher_pid = job.launcher_pid;
  const pid_t group = ranks.group;

  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if (!o.no_rank_prefix && (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)) {
    std::fprintf(stderr, "engramlab launch: pipe for rank %d: %s; stopping the others\n", rank, std::strerror(errno));
    return ranks.abandon();
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::fprintf(stderr, "engramlab launch: fork for rank %d failed: %s; stopping the others\n", rank,
                 std::strerror(errno));
    return ranks.abandon();
  }
  if (pid == 0) {
    // Told when the launcher dies, even a SIGKILLed one, in time to tear
    // down (the guard SIGKILLs the group soon after); if it is already gone, stop.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != launcher_pid) ::_exit(1);
    // One process group for the job's ranks: the terminal's Ctrl-C reaches
    // the launcher alone, which forwards it once.
    ::setpgid(0, group);
    ::signal(SIGPIPE, SIG_DFL);
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
  if (ranks.group == 0) ranks.group = pid;
  ::setpgid(pid, ranks.group);  // also here: whichever runs first makes it so
  ranks.rank_of[pid] = rank;
  if (out_pipe[0] >= 0) {
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    const std::string prefix = "[rank " + std::to_string(rank) + "] ";
    ranks.pipes.push_back({out_pipe[0], &out_dest, prefix, {}});
    ranks.pipes.push_back({err_pipe[0], &err_dest, prefix, {}});
  }
  return std::nullopt;
}

// The job from its first rank's start to its last rank's end: what the
// launcher decided so far.
struct Supervision {
  int exit_code = 0;
  std::optional<Clock::time_point> kill_at;
  bool killed = false;
  int forwarded = 0;
  std::optional<Clock::time_point> drain_until;
};

// Signals to the launcher go to every rank; the first one starts the grace.
void forward_signals(const LaunchOptions& o, RankProcesses& ranks, Supervision& job) {
  unsigned char sig = 0;
  while (::read(g_signal_pipe[0], &sig, 1) == 1) {
    const char* abbrev = sigabbrev_np(sig);
    std::fprintf(stderr, "engramlab launch: got SIG%s: forwarding it to the %zu running ranks%s\n",
                 abbrev ? abbrev : "?", ranks.rank_of.size(),
                 job.forwarded == 0 ? (", SIGKILL after " + std::to_string(o.grace_ms) + " ms").c_str() : "");
    ranks.stop_all(sig);
    if (job.forwarded++ == 0) {
      if (job.exit_code == 0) job.exit_code = 128 + sig;
      if (!job.kill_at) job.kill_at = Clock::now() + std::chrono::milliseconds(o.grace_ms);
    }
  }
}

// Reaps the ranks that ended; the first failure sets the exit code and
// gives the others the grace.
void reap_ranks(const LaunchOptions& o, RankProcesses& ranks, Supervision& job) {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    auto it = ranks.rank_of.find(pid);
    if (it == ranks.rank_of.end()) continue;
    const int rank = it->second;
    ranks.rank_of.erase(it);
    if (succeeded(status)) continue;
    std::fprintf(stderr, "engramlab launch: rank %d (pid %d) %s\n", rank, static_cast<int>(pid),
                 describe_exit(status).c_str());
    if (job.exit_code == 0) {
      job.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (!ranks.rank_of.empty() && !job.kill_at) {
        std::fprintf(stderr, "engramlab launch: giving the other %zu ranks %d ms to stop\n", ranks.rank_of.size(),
                     o.grace_ms);
        job.kill_at = Clock::now() + std::chrono::milliseconds(o.grace_ms);
      }
    }
  }
}

// Past the grace period: SIGKILL for every rank still running, once.
void kill_after_grace(const LaunchOptions& o, RankProcesses& ranks, Supervision& job) {
  if (!job.kill_at || job.killed || Clock::now() < *job.kill_at || ranks.rank_of.empty()) return;
  for (auto& [p, r] : ranks.rank_of) {
    std::fprintf(stderr, "engramlab launch: rank %d (pid %d) still running after the %d ms grace period: SIGKILL\n",
                 r, static_cast<int>(p), o.grace_ms);
  }
  ranks.stop_all(SIGKILL);
  job.killed = true;
}

// Relays output, forwards signals, reaps and kills until every rank has
// ended and its pipes are drained (or the drain deadline passed); returns
// the job's exit code.
int supervise(const LaunchOptions& o, RankProcesses& ranks) {
  Supervision job;
  std::vector<OutputPipe>& pipes = ranks.pipes;
  for (;;) {
    const bool pipes_open = std::any_of(pipes.begin(), pipes.end(), [](const OutputPipe& p) { return p.fd >= 0; });
    if (ranks.rank_of.empty() && (!pipes_open || (job.drain_until && Clock::now() >= *job.drain_until))) break;
    if (ranks.rank_of.empty() && !job.drain_until) job.drain_until = Clock::now() + std::chrono::milliseconds(500);

    std::vector<pollfd> fds;
    fds.push_back({g_signal_pipe[0], POLLIN, 0});
    std::vector<size_t> pipe_of;
    for (size_t i = 0; i < pipes.size(); ++i) {
      if (pipes[i].fd < 0) continue;
      fds.push_back({pipes[i].fd, POLLIN, 0});
      pipe_of.push_back(i);
    }
    ::poll(fds.data(), fds.size(), 50);

    forward_signals(o, ranks, job);
    for (size_t k = 1; k < fds.size(); ++k) {
      if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) relay(pipes[pipe_of[k - 1]], false);
    }
    reap_ranks(o, ranks, job);
    kill_after_grace(o, ranks, job);
  }
  return job.exit_code;
}

// What the ranks wrote before they exited is still in the pipes when the
// drain deadline passed (a launcher descheduled under load): read it all,
// without blocking on a pipe that something the rank started keeps open.
void drain_pipes(std::vector<OutputPipe>& pipes) {
  for (OutputPipe& p : pipes) {
    if (p.fd < 0) continue;
    ::fcntl(p.fd, F_SETFL, ::fcntl(p.fd, F_GETFL) | O_NONBLOCK);
    while (p.fd >= 0 && pipe_has_data(p.fd)) relay(p, false);
    if (p.fd >= 0) relay(p, true);
  }
}

int launch(LaunchOptions o) {
  std::optional<EmulatedDriverJob> emulated;
  // However launch() returns, the world file's directory goes with the job.
  struct RemoveWorld {
    std::optional<EmulatedDriverJob>& job;
    ~RemoveWorld() {
      if (job) remove_emulated_driver_job(*job);
    }
  } remove_world{emulated};
  if (!o.emulate_driver.empty() && !o.emulated_world.empty()) {
    std::fprintf(stderr, "engramlab launch: --emulate-driver and --emulated-world name the world twice; give one\n");
    return 2;
  }
  if (!o.emulate_driver.empty() || !o.emulated_world.empty()) {
    auto prepared = o.emulated_world.empty() ? prepare_emulated_driver(o.emulate_driver)
                                             : emulated_driver_job_for_world(o.emulated_world);
    if (!prepared.is_ok()) {
      std::fprintf(stderr, "engramlab launch: %s\n", prepared.status().message().c_str());
      return prepared.status().code() == ErrorCode::kInvalidArgument ? 2 : 1;
    }
    emulated = std::move(prepared).value();
    const std::string ranks = std::to_string(emulated->local.size());
    if (o.nproc_per_node_text.empty()) o.nproc_per_node_text = ranks;
    if (o.nproc_per_node_text != ranks || o.nnodes_text != "1") {
      std::fprintf(stderr,
                   "engramlab launch: %s %s places %s ranks on its emulated hosts; start them all "
                   "on this node (--nproc-per-node %s, one node), or leave --nproc-per-node out\n",
                   o.emulated_world.empty() ? "--emulate-driver" : "--emulated-world",
                   o.emulated_world.empty() ? o.emulate_driver.c_str() : o.emulated_world.c_str(), ranks.c_str(),
                   ranks.c_str());
      return 2;
    }
  }
  if (Status s = check_options(o); !s.is_ok()) {
    std::fprintf(stderr, "engramlab launch: %s\n", s.message().c_str());
    return 2;
  }
  NodeJob job;
  job.emulated = emulated;
  job.world = o.nnodes * o.nproc_per_node;
  job.first_rank = o.node_rank * o.nproc_per_node;
  // The engine and the file's plan, before anything is started.
  const Result<LaunchPlan> planned = plan_before_launch(o.engine, o.file, job.world);
  if (!planned.is_ok()) {
    std::fprintf(stderr, "engramlab launch: %s\n", planned.status().to_string().c_str());
    return planned.status().code() == ErrorCode::kInvalidArgument ? 2 : 1;
  }
  for (const std::string& line : planned->lines) std::fprintf(stderr, "engramlab launch: %s\n", line.c_str());
  job.engine = planned->engine;
  if (o.master_addr.empty()) o.master_addr = "127.0.0.1";
  if (Stop stop = choose_token(o, job.token)) return *stop;
  if (Stop stop = choose_port(o, job.port)) return *stop;
  if (Stop stop = name_job(o, job.port)) return *stop;
  std::fprintf(stderr, "engramlab launch: job %s, node %d of %d, ranks %d-%d of %d, rendezvous %s:%d\n",
               o.job_id.c_str(), o.node_rank, o.nnodes, job.first_rank, job.first_rank + o.nproc_per_node - 1,
               job.world, o.master_addr.c_str(), job.port);
  std::fflush(stderr);
  if (Stop stop = prepare_signals_and_relay(o)) return *stop;
  Destination out_dest{STDOUT_FILENO, "stdout"};
  Destination err_dest{STDERR_FILENO, "stderr"};

  std::vector<char*> argv;
  for (const auto& arg : o.command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  job.launcher_pid = ::getpid();
  // The starter's pid as it gave it (scenario run --real does): a starter
  // killed before this line has already left us to init, and getppid() would
  // name init, which never dies, so the directory would stay.
  pid_t launcher_parent = ::getppid();
  if (const char* given = std::getenv("ENGRAMLAB_LAUNCH_PARENT_PID"); given != nullptr && !o.remove_with_parent.empty())
    if (const long pid = std::strtol(given, nullptr, 10); pid > 1) launcher_parent = static_cast<pid_t>(pid);
  const char* socket_dir = std::getenv("ENGRAMLAB_SOCKET_DIR");
  struct stat socket_dir_st{};
  job.socket_dir_was_there =
      socket_dir != nullptr && socket_dir[0] != '\0' && ::lstat(socket_dir, &socket_dir_st) == 0;
  RankProcesses ranks;
  for (int local = 0; local < o.nproc_per_node; ++local)
    if (Stop stop = start_rank(o, job, local, argv, out_dest, err_dest, ranks)) return *stop;

  const bool socket_dir_was_there = job.socket_dir_was_there;
  auto end_of_job_cleanup = [&o, launcher_parent, socket_dir_was_there, emulated] {
    remove_socket_dir_of_ended_job(o.job_id, socket_dir_was_there);
    if (emulated) remove_emulated_driver_job(*emulated);
    remove_dir_of_dead_parent(o.remove_with_parent, launcher_parent);
  };
  LaunchGuard guard(ranks.group, o.grace_ms, end_of_job_cleanup);

  const int exit_code = supervise(o, ranks);
  drain_pipes(ranks.pipes);
  // The ranks are reaped; what they started in the group goes with them.
  if (ranks.group > 0) ::kill(-ranks.group, SIGKILL);
  end_of_job_cleanup();
  guard.job_ended();
  std::fflush(stderr);
  return exit_code;
}

const CommandRegistration launch_registration("60-launch", [](CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "launch", "Start the ranks of one job on this host, one node or one node of many (torchrun's flags and "
                "environment; output prefixed by rank; signals forwarded)");
  auto o = std::make_shared<LaunchOptions>();
  // Required, but checked in check_options: CLI11 would name only one spelling.
  cmd->add_option(kNprocPerNodeSpelling.names, o->nproc_per_node_text,
                  spelled("ranks on this node: N, or gpu (the GPUs visible), auto (the GPUs, else the CPUs) or cpu",
                          kNprocPerNodeSpelling));
  cmd->add_option("--nnodes", o->nnodes_text, "nodes in the job (default 1)");
  cmd->add_option(kNodeRankSpelling.names, o->node_rank_text,
                  spelled("this node's index, 0..nnodes-1 (default 0)", kNodeRankSpelling));
  auto* addr = cmd->add_option(
      kMasterAddrSpelling.names, o->master_addr,
      spelled("address of node 0, where rank 0 listens (default 127.0.0.1; required with --nnodes > 1)",
              kMasterAddrSpelling));
  auto* port = cmd->add_option(
      kMasterPortSpelling.names, o->master_port_text,
      spelled("rendezvous port on node 0 (default: a free port on one node, 29500 on several)", kMasterPortSpelling));
  cmd->add_flag("--standalone", o->standalone,
                "torchrun's: one node, rendezvous on 127.0.0.1 at a free port (what one node gets by default here)");
  cmd->add_option("--job-id", o->job_id,
                  "job id (names sockets and /dev/shm segments); default ENGRAMLAB_JOB_ID, else job-<pid>-<time> on "
                  "one node, launch-<master addr>-<port> on several");
  cmd->add_option("--grace-ms", o->grace_ms_text, "after a rank fails or a signal arrives, how long the ranks may take "
                                             "to stop before SIGKILL (default 3000)");
  cmd->add_flag("--no-rank-prefix", o->no_rank_prefix, "pass the ranks' output through as is, without [rank N]");
  cmd->add_option("--remove-with-parent", o->remove_with_parent,
                  "a directory (absolute, named engramlab-*) to remove when the job ends if the process that started "
                  "the launcher has died by then (scenario run --real's result directory)")
      ->group("");  // internal
  cmd->add_option("--engine", o->engine,
                  fmt::format("whose rules the job plans by: {}; handed to every rank as ENGRAMLAB_ENGINE, which "
                              "acceptance, bench and doctor plan by (default: --file's engine.name, else the ranks' "
                              "own default)",
                              engine_names_text()));
  cmd->add_option("--file", o->file,
                  "a deployment file planned under the engine before any rank starts, as `plan --file` plans it: "
                  "a config the engine refuses (exit 2) or that cannot run (exit 1) starts nothing; its world "
                  "must be the launch's");
  cmd->add_option("--emulate-driver", o->emulate_driver,
                  "a deployment file whose world every rank runs in over the emulated CUDA driver and NVML (no GPU "
                  "needed): its hosts, GPUs, NVLink domains and IMEX channels; starts its ranks on this node");
  cmd->add_option("--emulated-world", o->emulated_world,
                  "an emulated driver's world file, written and removed by the caller (scenario run --real "
                  "--emulate-driver)")
      ->group("");  // internal
  cmd->add_option("command", o->command, "the command each rank runs, after `--`")->required();
  cmd->footer(std::string("Across nodes, set the job token once, before starting every node's launcher:\n  ") +
              ipc::kJobTokenLine + "\n");
  cmd->callback([o, addr, port, &exit_code] {
    o->master_given = addr->count() > 0 || port->count() > 0;
    exit_code = launch(*o);
  });
});

}  // namespace
}  // namespace engram::app
