#include "harness/real_scenario.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "backends/ranks/rank_device.h"
#include "harness/real_rank_process.h"
#include "backends/ipc/proc_host_probe.h"
#include "backends/ipc/real_rank_backend.h"
#include "backends/shm/posix_shared_memory.h"
#include "core/plan/deployment_plan.h"
#include "core/plan/memory_fit.h"
#include "core/deployment/deployment_validate.h"
#include "harness/scenario_check.h"
#include "harness/scenario_rank_record.h"
#include "core/base/rerun_command.h"
#include "core/base/shell_quote.h"
#include "core/base/size_text.h"
#include "core/base/text_excerpt.h"
#ifdef ENGRAM_HAVE_EMULATOR
#include "harness/emulated_scenario.h"
#endif
#ifdef ENGRAM_HAVE_EMULATED_DRIVER
#include "backends/emulated_driver/world_file.h"
#endif

namespace engram::harness {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr auto kJobDeadline = std::chrono::seconds(120);
constexpr int kLaunchGraceMs = 3000;

// SIGINT, SIGTERM or SIGHUP to the runner while a job runs: passed to the
// launcher (which stops the ranks), then the run's directory goes and the
// runner dies of the signal. Handlers only record and forward.
std::atomic<pid_t> g_launcher{0};
volatile sig_atomic_t g_stop_signal = 0;
void forward_to_launcher(int sig) {
  const int saved = errno;
  if (g_stop_signal == 0) g_stop_signal = sig;
  const pid_t launcher = g_launcher.load();
  if (launcher > 0) ::kill(launcher, sig);
  errno = saved;
}

// Held while the run's directory exists.
class StopSignalsForwarded {
 public:
  StopSignalsForwarded() {
    struct sigaction action{};
    action.sa_handler = forward_to_launcher;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &action, &previous_[i]);
  }
  ~StopSignalsForwarded() {
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
  }
  StopSignalsForwarded(const StopSignalsForwarded&) = delete;
  StopSignalsForwarded& operator=(const StopSignalsForwarded&) = delete;

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> previous_{};
};

// After the run's directory is gone: a stop signal that came meanwhile ends
// the runner now, as it would have at once without the handler.
void die_of_a_stop_signal_received() {
  const int sig = g_stop_signal;
  if (sig == 0) return;
  std::cout << std::flush;
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

struct LaunchRun {
  int exit_code = -1;
  std::string log;
  bool timed_out = false;
};

// engramlab launch -n N --job-id J -- engramlab scenario rank FILE --result-dir D,
// in its own process group so a stuck job can be ended whole, and told by
// SIGTERM (PR_SET_PDEATHSIG) to end the job if the runner dies, removing D.
// `world_text` (not empty: over the emulated driver) is written to D/world by
// the launcher's child, so it goes with D whoever removes it.
LaunchRun launch_ranks(const std::string& file, int ranks, const std::string& job_id, const std::string& dir,
                       const std::string& world_text) {
  LaunchRun run;
  const std::string self = rerun_binary();
  const std::string log_path = dir + "/launch.log";
  const std::string world_path = dir + "/world";
  std::vector<std::string> args = {self,
                                   "launch",
                                   "-n",
                                   std::to_string(ranks),
                                   "--job-id",
                                   job_id,
                                   "--grace-ms",
                                   std::to_string(kLaunchGraceMs),
                                   "--remove-with-parent",
                                   dir};
  if (!world_text.empty()) args.insert(args.end(), {"--emulated-world", world_path});
  args.insert(args.end(), {"--", self, "scenario", "rank", file, "--result-dir", dir});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t runner = ::getpid();
  // Who the launcher's --remove-with-parent waits on: it may start after we die.
  ::setenv("ENGRAMLAB_LAUNCH_PARENT_PID", std::to_string(runner).c_str(), 1);
  const pid_t pid = ::fork();
  if (pid < 0) {
    run.log = fmt::format("fork failed: {}", std::strerror(errno));
    return run;
  }
  if (pid == 0) {
    // Blocked until the launcher has its handlers (it unblocks them): the
    // death signal below, arriving while it starts, would otherwise end it
    // before it can remove `dir` (an empty launch.log left behind).
    sigset_t stops;
    sigemptyset(&stops);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stops, sig);
    ::sigprocmask(SIG_BLOCK, &stops, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != runner) ::_exit(1);  // the runner is gone already: nothing made, nothing left
    // Made here, after the death signal is set, not by the runner: a runner
    // killed before this point leaves nothing, and after it the launcher
    // removes the directory (--remove-with-parent).
    if (::mkdir(dir.c_str(), 0700) != 0) {
      const std::string why = fmt::format("engramlab scenario run --real: cannot create the result directory {}: {}\n",
                                          dir, std::strerror(errno));
      (void)!::write(2, why.data(), why.size());
      ::_exit(126);
    }
    if (!world_text.empty()) {
      // Plain system calls only: this is a forked child.
      const int world_fd = ::open(world_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      const bool written = world_fd >= 0 && ::write(world_fd, world_text.data(), world_text.size()) ==
                                                static_cast<ssize_t>(world_text.size());
      if (world_fd >= 0) ::close(world_fd);
      if (!written) {
        const std::string why = fmt::format("engramlab scenario run --real: cannot write the world file {}\n", world_path);
        (void)!::write(2, why.data(), why.size());
        ::unlink(world_path.c_str());
        ::rmdir(dir.c_str());
        ::_exit(126);
      }
    }
    ::setpgid(0, 0);
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  g_launcher.store(pid);
  if (g_stop_signal != 0) ::kill(pid, g_stop_signal);  // came before the pid was known
  auto deadline = Clock::now() + kJobDeadline;
  bool stopping = false;
  int status = 0;
  for (;;) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid) break;
    if (got < 0 && errno != EINTR) break;
    if (g_stop_signal != 0 && !stopping) {
      // The launcher has the signal: its grace, then the group goes.
      stopping = true;
      deadline = std::min(deadline, Clock::now() + std::chrono::milliseconds(kLaunchGraceMs + 1000));
    }
    if (Clock::now() > deadline) {
      run.timed_out = !stopping;
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  g_launcher.store(0);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  std::ifstream in(log_path);
  std::stringstream text;
  text << in.rdbuf();
  run.log = text.str();
  return run;
}

std::string placement_or_dash(const ScenarioRankResult& r) { return r.started ? placement_name(r.placement) : "-"; }

std::string hashes_text(const std::vector<uint64_t>& hashes) {
  std::string text;
  for (uint64_t h : hashes) text += fmt::format("{}{:016x}", text.empty() ? "" : ",", h);
  return text.empty() ? "-" : text;
}

struct RealOutcome {
  std::string name, source, placement = "-", error_kind = "-";
  std::string result;  // "pass", "FAIL", "skipped: ..."
  size_t warning_count = 0;
};

// Each check below either lets the scenario run here (nullopt) or names
// why it is skipped (the outcome's result), having said how to run it.
using Skip = std::optional<std::string>;

Skip skip_multi_host(const Scenario& scenario, const Deployment& completed) {
  if (completed.hosts.size() <= 1) return std::nullopt;
  const HostSpec& first = completed.hosts.front();
  const std::string self = shell_quote(rerun_binary());
  std::cout << fmt::format(
      "  skipped: the topology has {} hosts and `--real` starts one host's ranks. To reproduce it, on each host i "
      "(0..{}, named as in the file: {}, ...) with the same ENGRAMLAB_JOB_TOKEN ({}), run:\n"
      "    {} launch --nnodes {} --node-rank i --master-addr {} --nproc-per-node {} -- "
      "{} scenario rank {} --result-dir DIR\n"
      "  (or the same `scenario rank` under torchrun, srun or mpirun)\n\n",
      completed.hosts.size(), completed.hosts.size() - 1, first.name, ipc::kJobTokenLine, self,
      completed.hosts.size(), shell_quote(first.name), first.gpu_count, self,
      shell_quote(absolute_file_path(scenario.source)));
  return "skipped: multi-host";
}

Skip skip_too_many_ranks(const Scenario& scenario, int world) {
  if (world <= kMaxRealRanks) return std::nullopt;
  std::cout << fmt::format("  skipped: {} ranks is more than {} real processes on one host; it runs on the "
                           "emulator (`engramlab scenario run {}`) or on a cluster with its launcher\n\n",
                           world, kMaxRealRanks, shell_quote(scenario.source));
  return "skipped: too many ranks";
}

Skip skip_fault_plan(const Scenario& scenario) {
  if (scenario.planned_faults.empty() && scenario.fault_rates.empty()) return std::nullopt;
  std::cout << "  skipped: its fault plan names emulator fault sites; real processes crash for real in "
               "tests/real_runtime_test.cc\n\n";
  return "skipped: fault plan (emulator only)";
}

// Device placements run when every rank has a GPU of its own here (rank r
// opens GPU LOCAL_RANK = r); otherwise they are skipped, visibly. `gpus`:
// what this host has, when the plan places tables on the device.
Skip skip_without_gpus(const Result<PlanResult>& plan, int world, int ranks_per_gpu,
                       std::optional<ranks::VisibleGpus>& gpus) {
  std::optional<Placement> device_placement;
  if (plan.is_ok())
    for (const RankPlan& rp : plan->ranks)
      if (is_device_placement(rp.placement)) device_placement = rp.placement;
  if (!device_placement) return std::nullopt;
  gpus = ranks::visible_gpus();
  if (gpus->count * ranks_per_gpu >= world) return std::nullopt;
  std::cout << fmt::format("  skipped: needs GPUs (plan places {} on the device for {} ranks; {})\n\n",
                           placement_name(*device_placement), world,
                           gpus->count == 0 ? "this host has none: " + gpus->reason
                                            : fmt::format("this host has {} GPU(s)", gpus->count));
  return "skipped: needs GPUs";
}

// The facts the real ranks will see, beside the scenario's host's. When the
// decisions or warnings follow them and this host differs (and not --here),
// skipped, saying how to make this machine the scenario's host.
Skip skip_other_host(const Scenario& scenario, const Result<PlanResult>& plan, const HostSpec& host,
                     const RealRunOptions& options) {
  auto shm_options = ipc::real_backend_options(ipc::process_env());
  const std::string shm_dir = shm_options.is_ok() ? shm_options->shm_dir : "/dev/shm";
  shm::PosixSharedMemory shm_probe({.root_dir = shm_dir});
  auto shm_info = shm_probe.info();
  auto identity = ipc::read_host_identity();
  const bool here_mounted = shm_info.is_ok() && shm_info->mounted;
  const std::string here_shm = here_mounted ? format_size_short(shm_info->tmpfs_bytes_total) : "not mounted";
  const std::string their_shm = host.shm_mounted ? format_size_short(host.tmpfs_bytes_total) : "not mounted";
  std::cout << fmt::format("  facts: this host {}, {} {}; the scenario's host {}, /dev/shm {}\n",
                           identity.is_ok() ? identity->hostname : "?", excerpt(shm_dir, kEchoedValueBytes), here_shm,
                           host.name, their_shm);
  // Decisions and warnings follow the hostname and the tmpfs total: on
  // another host the comparison would fail for reasons of this machine, not
  // of the code. Device placements without warnings depend on neither.
  bool facts_matter = !plan.is_ok() || !plan->warnings.empty();
  if (plan.is_ok())
    for (const RankPlan& rp : plan->ranks) facts_matter |= !is_device_placement(rp.placement);
  const bool same_name = identity.is_ok() && identity->hostname == host.name;
  // Within 1%, as doctor --file compares /dev/shm sizes (a tmpfs rounds its size to pages).
  auto within_one_percent = [](uint64_t a, uint64_t b) {
    const uint64_t high = std::max(a, b), low = std::min(a, b);
    return (high - low) <= high / 100;
  };
  const bool same_shm = here_mounted == host.shm_mounted &&
                        (!here_mounted || within_one_percent(shm_info->tmpfs_bytes_total, host.tmpfs_bytes_total));
  if (!facts_matter || options.here || (same_name && same_shm)) return std::nullopt;
  const std::string mount =
      host.shm_mounted ? fmt::format("mount -t tmpfs -o size={}k tmpfs {} && ", (host.tmpfs_bytes_total + 1023) / 1024,
                                     shell_quote(shm_dir))
                       : fmt::format("umount {} && ", shell_quote(shm_dir));
  const std::string rerun = rerun_command({"scenario", "run", "--real", absolute_file_path(scenario.source)});
  const std::string inner = fmt::format("{}hostname {} && {}", mount, shell_quote(host.name), rerun);
  std::cout << fmt::format(
      "  skipped: this host is not the scenario's ({}{}{}). To reproduce it, give this machine its host's name "
      "and /dev/shm in namespaces (as root):\n"
      "    unshare --mount --uts --propagation private sh -c {}\n"
      "  or add --here to run it on this machine as it is and see what differs\n\n",
      same_name ? "" : fmt::format("hostname {} vs {}", identity.is_ok() ? identity->hostname : "?", host.name),
      !same_name && !same_shm ? "; " : "",
      same_shm ? ""
               : fmt::format("{} {} vs {}", excerpt(shm_dir, kEchoedValueBytes),
                             // Sizes that print alike are said in bytes, so the difference shows.
                             here_shm == their_shm && here_mounted ? fmt::format("{} B", shm_info->tmpfs_bytes_total)
                                                                   : here_shm,
                             here_shm == their_shm && here_mounted ? fmt::format("{} B", host.tmpfs_bytes_total)
                                                                   : their_shm),
      shell_quote(inner));
  return "skipped: not this host";
}

#ifdef ENGRAM_HAVE_EMULATED_DRIVER
// The emulator's fault sites the emulated driver arms under the same name
// (backends/emulated_driver/emulated_process.cc).
bool driver_fault_site(const ScenarioFault& f) {
  return (f.site == "import" || f.site == "map" || f.site == "access") && f.at.empty() && f.delay_ms == 0;
}

// Over the emulated driver: what it cannot run here, skipped, saying why.
Skip skip_for_emulated_driver(const Scenario& scenario, const Result<PlanResult>& plan, const Deployment& completed,
                              int world) {
  if (world > kMaxEmulatedDriverRanks) {
    std::cout << fmt::format("  skipped: {} ranks is more than the {} processes --emulate-driver starts (one NVL72 "
                             "rack); it runs on the emulator (`engramlab scenario run {}`)\n\n",
                             world, kMaxEmulatedDriverRanks, shell_quote(scenario.source));
    return "skipped: too many ranks";
  }
  if (!scenario.fault_rates.empty()) {
    std::cout << "  skipped: fault rates are drawn by the emulator; write a drawn case out with `scenario run "
                 "--emit` and plan its faults\n\n";
    return "skipped: fault plan (emulator only)";
  }
  for (const ScenarioFault& f : scenario.planned_faults)
    if (!driver_fault_site(f)) {
      std::cout << fmt::format("  skipped: fault {} on rank {}{} is an emulator fault site; the emulated driver arms "
                               "import, map and access (without at: or delay_ms:)\n\n",
                               f.site, f.rank, f.at.empty() ? "" : " at " + f.at);
      return "skipped: fault plan (emulator only)";
    }
  for (const HostSpec& h : completed.hosts)
    if (h.visible_gpus_per_rank > 0) {
      std::cout << fmt::format("  skipped: host {} puts each rank in a container of its own seeing {} GPU(s); "
                               "--emulate-driver starts a host's ranks from one launcher, which sees them all. It "
                               "runs on the emulator\n\n",
                               h.name, h.visible_gpus_per_rank);
      return "skipped: containers";
    }
  // A refusal of a device_peer request is the exchange's business, which
  // runs here; any other comes from the host's memory limits, /dev/shm or
  // namespaces, which real ranks read from this machine, not the file.
  if (!plan.is_ok() && !completed.config.peer_shards) {
    std::cout << "  skipped: the plan refuses it on facts of its host beyond the GPUs (memory limits, /dev/shm, "
                 "namespaces), which real ranks read from this machine; it runs on the emulator, or without "
                 "--emulate-driver on a host like the file's\n\n";
    return "skipped: host facts";
  }
  if (plan.is_ok())
    for (const RankPlan& rp : plan->ranks)
      if (rp.placement != Placement::kDevicePeer) {
        std::cout << fmt::format(
            "  skipped: the plan places {} on rank {}; over the emulated driver only device_peer runs (host "
            "tables would share this machine's /dev/shm across the emulated hosts; device_collective and "
            "device_head_sharded need NCCL, which the emulated driver refuses). Run it without --emulate-driver, "
            "or on GPUs\n\n",
            placement_name(rp.placement), &rp - plan->ranks.data());
        return "skipped: not device_peer";
      }
  return std::nullopt;
}

// The scenario's world file, its planned faults armed at their occurrence.
Result<std::string> emulated_world_text(const Scenario& scenario, const Deployment& completed) {
  std::vector<emulated::WorldFault> faults;
  for (const ScenarioFault& f : scenario.planned_faults)
    faults.push_back({.site = f.site, .rank = f.rank, .nth = f.occurrence, .delay_ms = 0});
  return emulated::world_file_text(completed, faults);
}

// The driver's "fault 'S' fired on rank R" lines in the launcher's log
// against the plan and the expectation. True when any fired.
bool check_driver_faults(const Scenario& scenario, const std::string& log, std::vector<std::string>& fail) {
  std::set<std::pair<std::string, int>> fired;
  static const std::regex kFired("fault '([a-z_]+)' fired on rank ([0-9]+)");
  for (std::sregex_iterator it(log.begin(), log.end(), kFired), end; it != end; ++it)
    fired.insert({(*it)[1].str(), std::stoi((*it)[2].str())});
  std::string said;
  for (const auto& [site, rank] : fired) said += fmt::format("{}{} on rank {}", said.empty() ? "" : ", ", site, rank);
  std::cout << "  faults fired in the emulated driver: " << (said.empty() ? "none" : said) << "\n";
  for (const ScenarioFault& f : scenario.planned_faults)
    if (!fired.count({f.site, f.rank}))
      fail.push_back(fmt::format("planned fault {} on rank {} never fired in the emulated driver: the scenario "
                                 "tested nothing there",
                                 f.site, f.rank));
  for (const std::string& site : scenario.expect.faults_fired)
    if (std::none_of(fired.begin(), fired.end(), [&](const auto& f) { return f.first == site; }))
      fail.push_back(fmt::format("fault site {} never fired in the emulated driver", site));
  return !fired.empty();
}
#endif  // ENGRAM_HAVE_EMULATED_DRIVER

// What the real ranks left: the launcher's run, each rank's record (or why
// it has none) and their warnings.
struct RealRanks {
  LaunchRun launched;
  std::vector<ScenarioRankResult> ranks;
  std::vector<Status> statuses;
  std::vector<Warning> warnings;
};

// Each rank's record in `dir`, read whole.
void read_rank_records(const std::string& dir, int world, RealRanks& out) {
  out.ranks.assign(static_cast<size_t>(world), {});
  out.statuses.assign(static_cast<size_t>(world), Status());
  for (int r = 0; r < world; ++r) {
    const std::string path = rank_result_path(dir, r);
    std::ifstream in(path);
    std::string line;
    if (!in || !std::getline(in, line)) {
      out.statuses[static_cast<size_t>(r)] =
          Status(ErrorCode::kUnavailable, "rank left no result (it died or was killed; see the launcher log)",
                 {r, -1, "result"});
      continue;
    }
    auto record = parse_rank_record(line, path);
    if (!record.is_ok()) {
      out.statuses[static_cast<size_t>(r)] = record.status();
      continue;
    }
    out.ranks[static_cast<size_t>(r)] = record->result;
    out.statuses[static_cast<size_t>(r)] = record->status;
    for (const Warning& w : record->warnings) append_unique(out.warnings, w);
  }
}

// Real ranks, launched and read back. The directory names this runner, so
// what a killed one left is told from another's. Nullopt (said why) when
// there is no result directory.
std::optional<RealRanks> run_real_ranks(const Scenario& scenario, int index, int world, const HostSpec& host,
                                        const std::string& world_text) {
  std::optional<StopSignalsForwarded> forwarding(std::in_place);
  // Named here, created by the launcher's child (launch_ranks), so no kill of
  // this runner falls between the directory's making and its remover's start.
  // The random part keeps the name from other users; mkdir there refuses a
  // name already taken.
  std::random_device random;
  const uint64_t unguessable = (uint64_t{random()} << 32) | random();
  const std::string dir = fmt::format("/tmp/engramlab-real-{}-{:016x}", ::getpid(), unguessable);
  const std::string job_id = fmt::format("real-{}-{}", ::getpid(), index);
  // The scenario's host, not this machine, decides which fixes warnings name.
  ::setenv("ENGRAMLAB_ENVIRONMENT", runtime_environment_name(host.environment), 1);
  RealRanks out;
  out.launched = launch_ranks(scenario.source, world, job_id, dir, world_text);
  if (g_stop_signal != 0) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    die_of_a_stop_signal_received();
  }
  read_rank_records(dir, world, out);
  // Read whole (the log is in `launched`): nothing stays behind, pass or fail,
  // and a stop signal from here on finds nothing to tidy.
  {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  forwarding.reset();
  die_of_a_stop_signal_received();
  // Removing a crashed run's segments is this machine's business, not the
  // scenario's: shown, but neither checked nor compared.
  std::vector<Warning> stale;
  std::erase_if(out.warnings, [&stale](const Warning& w) {
    if (w.key.rfind("shm.stale_segment_removed", 0) != 0) return false;
    stale.push_back(w);
    return true;
  });
  for (const Warning& w : stale) std::cout << "  note: " << w.text << "\n";
  return out;
}

#ifdef ENGRAM_HAVE_EMULATOR
// The emulator on the same file.
harness::EmulatedOutcome run_on_emulator(const Scenario& scenario) {
  harness::EmulatedJob job;
  job.deployment = scenario.deployment;
  job.seed = scenario.seed;
  // The planned faults (only a run over the emulated driver gets this far
  // with any): the same plan on both sides.
  auto faults = harness::fault_plan_of(scenario);
  ENGRAM_CHECK(faults.is_ok());  // the scenario file loaded
  job.faults = std::move(faults).value();
  job.lookup = scenario.lookup;
  job.reproduction = rerun_command({"scenario", "run", absolute_file_path(scenario.source)});
  return harness::run_emulated_job(job);
}

// Per rank: the placement and lookup hashes, real beside emulated.
// Over the emulated driver the handle types too: the real backend chose them
// from the driver's answers, the emulator from its model of the same world.
std::string handle_or_dash(const ScenarioRankResult& r) {
  return r.handle_type ? handle_type_name(*r.handle_type) : "-";
}

void compare_ranks(int world, const std::vector<ScenarioRankResult>& ranks, const harness::EmulatedOutcome& emu,
                   bool compare_handles, std::vector<std::string>& fail) {
  std::cout << fmt::format("  {:<4}  {:<17}  {:<17}  {:<35}  {}\n", "rank", "real", "emulator", "lookup hashes (real)",
                           "same");
  for (int r = 0; r < world; ++r) {
    const ScenarioRankResult& real = ranks[static_cast<size_t>(r)];
    const ScenarioRankResult* em = r < static_cast<int>(emu.ranks.size()) ? &emu.ranks[static_cast<size_t>(r)] : nullptr;
    std::vector<std::string> diffs;
    if (em == nullptr) diffs.push_back("the emulator has no such rank");
    else {
      if (placement_or_dash(real) != placement_or_dash(*em))
        diffs.push_back(fmt::format("placement {} vs {}", placement_or_dash(real), placement_or_dash(*em)));
      if (compare_handles && handle_or_dash(real) != handle_or_dash(*em))
        diffs.push_back(fmt::format("handle type {} vs {}", handle_or_dash(real), handle_or_dash(*em)));
      if (real.lookup_hashes != em->lookup_hashes)
        diffs.push_back(fmt::format("lookup hashes {} vs {}", hashes_text(real.lookup_hashes),
                                    hashes_text(em->lookup_hashes)));
    }
    std::cout << fmt::format("  {:<4}  {:<17}  {:<17}  {:<35}  {}\n", r, placement_or_dash(real),
                             em ? placement_or_dash(*em) : "-", hashes_text(real.lookup_hashes),
                             diffs.empty() ? "yes" : "NO");
    for (const std::string& diff : diffs) fail.push_back(fmt::format("rank {}: real vs emulator: {}", r, diff));
  }
}

// Warnings: the same keys with the same text (texts name the host, so the
// real hostname must be the scenario's).
void compare_warnings(const std::vector<Warning>& warnings, const harness::EmulatedOutcome& emu,
                      std::vector<std::string>& fail) {
  auto warning_lines = [](const std::vector<Warning>& list) {
    std::string text;
    for (const Warning& w : list) text += fmt::format("\n    [{}] {}", w.key, w.text);
    return text.empty() ? std::string(" none") : text;
  };
  std::vector<Warning> real_sorted = warnings, emu_sorted = emu.warnings;
  auto by_key = [](const Warning& a, const Warning& b) { return a.key < b.key; };
  std::sort(real_sorted.begin(), real_sorted.end(), by_key);
  std::sort(emu_sorted.begin(), emu_sorted.end(), by_key);
  const bool warnings_same = real_sorted == emu_sorted;
  std::cout << fmt::format("  warnings: real {}, emulator {}: {}\n", warnings.size(), emu.warnings.size(),
                           warnings_same ? "same" : "DIFFERENT");
  if (!warnings_same)
    fail.push_back(fmt::format("warnings differ: real:{}\n  emulator:{}", warning_lines(warnings),
                               warning_lines(emu.warnings)));
}

// The error kinds, real beside emulated; returns the real one ("-": none).
std::string compare_errors(const std::optional<Status>& error, const harness::EmulatedOutcome& emu,
                           std::vector<std::string>& fail) {
  const std::string real_kind = error ? error_code_name(error->code()) : "-";
  const std::string emu_kind = emu.error ? error_code_name(emu.error->code()) : "-";
  std::cout << fmt::format("  error: real {}, emulator {}: {}\n", real_kind, emu_kind,
                           real_kind == emu_kind ? "same" : "DIFFERENT");
  if (error) std::cout << "    real: " << error->to_string() << "\n";
  if (real_kind != emu_kind)
    fail.push_back(fmt::format("error kind differs: real {}, emulator {}{}", real_kind, emu_kind,
                               emu.error ? ": " + emu.error->to_string() : ""));
  return real_kind;
}

#endif  // ENGRAM_HAVE_EMULATOR

void print_failures(const std::vector<std::string>& fail, const LaunchRun& launched) {
  for (const std::string& f : fail) std::cout << "  - " << f << "\n";
  if (fail.empty()) return;
  std::cout << fmt::format("  launcher exit {}; its log:\n", launched.exit_code);
  std::istringstream lines(launched.log);
  for (std::string line; std::getline(lines, line);) std::cout << "    | " << line << "\n";
}

RealOutcome run_one(const Scenario& scenario, int index, const RealRunOptions& options) {
  RealOutcome o;
  o.name = scenario.name;
  o.source = scenario.source;
  // The file's name as printed.
  std::cout << fmt::format("== {} ({})\n", scenario.name, excerpt(scenario.source, kEchoedValueBytes));

  const Deployment& d = scenario.deployment;
  WarningSink plan_sink;
  Result<PlanResult> plan = plan_that_fits(d, plan_sink);
  auto completed = plan.is_ok() ? Result<Deployment>(plan->deployment) : validate_and_complete(d);
  if (!completed.is_ok()) {
    // No rank could start; a scenario that expects this refusal passes.
    std::vector<std::string> fail;
    check_scenario_error(scenario.expect, completed.status(), fail);
    o.error_kind = error_code_name(completed.status().code());
    o.result = fail.empty() ? "pass" : "FAIL";
    std::cout << "  the scenario's deployment is refused before any rank starts: " << completed.status().to_string()
              << "\n";
    for (const std::string& f : fail) std::cout << "  - " << f << "\n";
    std::cout << "  => " << o.result << "\n\n";
    return o;
  }
  const int world = completed->layout.world_size();
  std::optional<ranks::VisibleGpus> gpus;
  Skip skipped;
  std::string world_text;  // over the emulated driver: the scenario's world
  if (options.emulate_driver) {
#ifdef ENGRAM_HAVE_EMULATED_DRIVER
    skipped = skip_for_emulated_driver(scenario, plan, *completed, world);
    if (!skipped) {
      auto text = emulated_world_text(scenario, *completed);
      if (!text.is_ok()) {
        o.result = "FAIL";
        std::cout << "  its world cannot be emulated: " << text.status().to_string() << "\n";
        return o;
      }
      world_text = std::move(text).value();
      std::cout << fmt::format("  emulated driver: {} ranks on {} emulated hosts ({} x {}), as the file describes "
                               "them\n",
                               world, completed->hosts.size(), completed->hosts[0].gpu_count,
                               completed->hosts[0].gpu_model);
    }
#else
    std::cout << "  skipped: this build has no emulated CUDA driver (cuda.h was not found at configure time, or it "
                 "is a sanitizer build)\n\n";
    skipped = "skipped: no emulated driver";
#endif
  } else {
    skipped = skip_multi_host(scenario, *completed);
    if (!skipped) skipped = skip_too_many_ranks(scenario, world);
    if (!skipped) skipped = skip_fault_plan(scenario);
    if (!skipped) skipped = skip_without_gpus(plan, world, completed->hosts[0].ranks_per_gpu, gpus);
    if (!skipped) skipped = skip_other_host(scenario, plan, completed->hosts[0], options);
  }
  if (skipped) {
    o.result = *skipped;
    return o;
  }
  const HostSpec& host = completed->hosts[0];
  if (gpus)
    std::cout << fmt::format("  gpus: this host {} visible, ranks 0..{} on GPUs 0..{}{}; the scenario's host {} x {}\n",
                             gpus->count, world - 1, (world - 1) / host.ranks_per_gpu,
                             host.ranks_per_gpu > 1 ? fmt::format(" ({} ranks a GPU)", host.ranks_per_gpu) : "",
                             host.gpu_count, host.gpu_model);

  std::optional<RealRanks> real = run_real_ranks(scenario, index, world, host, world_text);
  if (!real) {
    o.result = "FAIL";
    return o;
  }
  std::vector<std::string> fail;
  const std::optional<Status> error = scenario_root_cause(real->statuses);
  if (real->launched.timed_out)
    fail.push_back(fmt::format("the real job did not end within {} s", kJobDeadline.count()));

  bool faults_fired = false;
#ifdef ENGRAM_HAVE_EMULATED_DRIVER
  if (!world_text.empty()) faults_fired = check_driver_faults(scenario, real->launched.log, fail);
#endif
  // Expectations, checked as on the emulator. An error a driver fault caused
  // is in the driver's words (the code the real driver returns), not in the
  // emulator's fault text: its kind, rank and step are checked.
  ScenarioExpect expect = scenario.expect;
  if (faults_fired && expect.error && !expect.error->contains.empty()) {
    std::cout << "  error words: the driver's, not the emulator's fault text; kind, rank and step checked\n";
    expect.error->contains.clear();
  }
  check_scenario_error(expect, error, fail);
  check_scenario_decisions(expect, plan, error, real->ranks, real->warnings, faults_fired, fail);
  check_scenario_handle_types(expect, plan, real->ranks, fail);
  check_scenario_lookups(expect, real->ranks, fail);

#ifdef ENGRAM_HAVE_EMULATOR
  const harness::EmulatedOutcome emu = run_on_emulator(scenario);
  compare_ranks(world, real->ranks, emu, options.emulate_driver, fail);
  compare_warnings(real->warnings, emu, fail);
  const std::string real_kind = compare_errors(error, emu, fail);
#else
  // A build without the emulator (ENGRAM_BUILD_EMULATOR=OFF): the real run's
  // own expectations only.
  std::cout << "  emulator: not compared (this build has no emulator: ENGRAM_BUILD_EMULATOR=OFF)\n";
  const std::string real_kind = error ? error_code_name(error->code()) : "-";
  if (error) std::cout << "    real: " << error->to_string() << "\n";
#endif

  o.placement = scenario_placement_summary(plan, real->ranks);
  o.warning_count = real->warnings.size();
  o.error_kind = real_kind;
  o.result = fail.empty() ? "pass" : "FAIL";
  print_failures(fail, real->launched);
  std::cout << "  => " << o.result << "\n\n";
  return o;
}

}  // namespace

int run_scenarios_real(const std::vector<Scenario>& scenarios, const RealRunOptions& options) {
  std::vector<RealOutcome> outcomes;
  for (size_t i = 0; i < scenarios.size(); ++i) outcomes.push_back(run_one(scenarios[i], static_cast<int>(i), options));
  size_t name_width = 8, placement_width = 9;
  for (const auto& o : outcomes) {
    name_width = std::max(name_width, o.name.size());
    placement_width = std::max(placement_width, o.placement.size());
  }
  std::cout << fmt::format("{:<{}}  {:<{}}  {:>8}  {:<19}  {}\n", "scenario", name_width, "placement", placement_width,
                           "warnings", "error", "result (real processes vs emulator)");
  int passed = 0, skipped = 0, failed = 0;
  for (const auto& o : outcomes) {
    std::cout << fmt::format("{:<{}}  {:<{}}  {:>8}  {:<19}  {}\n", o.name, name_width, o.placement, placement_width,
                             o.warning_count, o.error_kind, o.result);
    if (o.result == "pass") ++passed;
    else if (o.result.rfind("skipped", 0) == 0) ++skipped;
    else ++failed;
  }
  std::cout << fmt::format("\n{} passed, {} skipped, {} failed of {} scenarios on real processes\n", passed, skipped,
                           failed, outcomes.size());
  return failed == 0 ? 0 : 1;
}

}  // namespace engram::harness
