#include "backends/emulated_driver/emulated_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace engram::emulated {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

Process load() {
  Process p;
  const char* path = env("ENGRAMLAB_EMULATED_WORLD");
  if (path == nullptr) {
    p.error = "ENGRAMLAB_EMULATED_WORLD is not set: point it at a world file (engramlab launch --emulate-driver "
              "writes one from a deployment file)";
    return p;
  }
  p.world_path = path;
  p.world_fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (p.world_fd < 0) {
    p.error = std::string("ENGRAMLAB_EMULATED_WORLD=") + path + ": " + std::strerror(errno);
    return p;
  }
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::pread(p.world_fd, buf, sizeof buf, static_cast<off_t>(text.size()))) > 0;)
    text.append(buf, static_cast<size_t>(n));
  std::string why;
  if (!parse_world(text, p.world, why)) {
    p.error = std::string("ENGRAMLAB_EMULATED_WORLD=") + path + ": " + why;
    return p;
  }
  // Faults armed from the environment as well as from the file:
  // ENGRAMLAB_EMULATED_FAULTS="site:rank[:nth[:delay_ms]],..." (a scenario's or a
  // fuzz seed's plan handed to every rank by its launcher).
  if (const char* armed = env("ENGRAMLAB_EMULATED_FAULTS")) {
    std::stringstream list(armed);
    for (std::string item; std::getline(list, item, ',');) {
      std::string fields[4];
      std::stringstream parts(item);
      for (std::string& f : fields) std::getline(parts, f, ':');
      std::string line = "engramlab-emulated-world 1\nhost name=x gpus=1 memory_bytes=1 granularity_bytes=1\nfault site=" +
                         fields[0] + " rank=" + (fields[1].empty() ? "-1" : fields[1]) +
                         (fields[2].empty() ? "" : " nth=" + fields[2]) +
                         (fields[3].empty() ? "" : " delay_ms=" + fields[3]) + "\n";
      World one;
      if (!parse_world(line, one, why)) {
        p.error = "ENGRAMLAB_EMULATED_FAULTS: '" + item + "': " + why.substr(why.find(": ") + 2) +
                  " (write site:rank[:nth[:delay_ms]])";
        return p;
      }
      p.world.faults.push_back(one.faults.front());
    }
  }
  struct stat st{};
  ::fstat(p.world_fd, &st);
  char id[17];
  std::snprintf(id, sizeof id, "%016llx",
                static_cast<unsigned long long>(fnv1a(std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino))));
  p.world_id = id;
  // Marks this process as one of the world's, for the ledger's scan: an
  // abstract socket, which has no file and goes with the process.
  p.member_fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string member = "engramlab-emu-proc." + p.world_id + "." + std::to_string(::getpid());
  std::memcpy(addr.sun_path + 1, member.data(), member.size());
  if (p.member_fd >= 0 &&
      ::bind(p.member_fd, reinterpret_cast<sockaddr*>(&addr),
             static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + member.size())) != 0) {
    p.error = std::string("cannot bind the world's member socket: ") + std::strerror(errno);
    return p;
  }
  const char* rank_text = env("RANK");
  if (rank_text == nullptr) rank_text = env("OMPI_COMM_WORLD_RANK");
  if (rank_text == nullptr) rank_text = env("SLURM_PROCID");
  if (rank_text == nullptr) {
    if (p.world.hosts.size() != 1) {
      p.error = "no RANK (nor OMPI_COMM_WORLD_RANK, SLURM_PROCID) in the environment, and the world has " +
                std::to_string(p.world.hosts.size()) + " hosts: the rank says which host this process is on";
      return p;
    }
    p.rank = 0;
    p.host = 0;
  } else {
    p.rank = std::atoi(rank_text);
    if (p.rank < 0 || p.rank >= static_cast<int>(p.world.rank_hosts.size())) {
      p.error = std::string("RANK=") + rank_text + " but the world file places " +
                std::to_string(p.world.rank_hosts.size()) + " ranks";
      return p;
    }
    p.host = p.world.rank_hosts[static_cast<size_t>(p.rank)];
  }
  const int gpus = p.my_host().gpus;
  if (const char* visible = env("CUDA_VISIBLE_DEVICES")) {
    // As the driver reads it: indices up to the first that is not a GPU of
    // this host; the rest of the list is ignored.
    std::set<int> seen;
    std::stringstream in(visible);
    for (std::string item; std::getline(in, item, ',');) {
      char* end = nullptr;
      const long g = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || g < 0 || g >= gpus || !seen.insert(static_cast<int>(g)).second) break;
      p.visible.push_back(static_cast<int>(g));
    }
  } else {
    for (int g = 0; g < gpus; ++g) p.visible.push_back(g);
  }
  p.ready = true;
  return p;
}

}  // namespace

std::string Process::where() const {
  return "rank " + std::to_string(rank) + " (host " + (ready ? my_host().name : std::string("?")) + ")";
}

const Process& process() {
  static const Process instance = load();
  return instance;
}

void say(const std::string& line) {
  const std::string text = "engramlab emulated driver: " + line + "\n";
  [[maybe_unused]] ssize_t n = ::write(2, text.data(), text.size());
}

std::string memfd_name(const Process& p, int host, int gpu) {
  return "engramlab-emu." + p.world_id + ".h" + std::to_string(host) + ".g" + std::to_string(gpu);
}

bool parse_memfd_link(const Process& p, const std::string& link, int& host, int& gpu) {
  const std::string prefix = "/memfd:engramlab-emu." + p.world_id + ".h";
  if (link.compare(0, prefix.size(), prefix) != 0) return false;
  return std::sscanf(link.c_str() + prefix.size(), "%d.g%d", &host, &gpu) == 2;
}

uint64_t used_bytes(const Process& p, int host, int gpu) {
  // The world's processes, from their member sockets (/proc/net/unix lists
  // abstract names as "@name"); only their descriptors are read.
  std::set<std::string> pids;
  {
    std::ifstream sockets("/proc/net/unix");
    const std::string prefix = "@engramlab-emu-proc." + p.world_id + ".";
    for (std::string line; std::getline(sockets, line);) {
      const size_t at = line.find(prefix);
      if (at != std::string::npos) pids.insert(line.substr(at + prefix.size()));
    }
  }
  std::set<ino_t> counted;
  uint64_t bytes = 0;
  for (const std::string& pid : pids) {
    const std::string fd_dir = "/proc/" + pid + "/fd";
    DIR* fds = ::opendir(fd_dir.c_str());
    if (fds == nullptr) continue;  // gone since
    while (const dirent* f = ::readdir(fds)) {
      if (f->d_name[0] == '.') continue;
      const std::string path = fd_dir + "/" + f->d_name;
      char link[256];
      const ssize_t n = ::readlink(path.c_str(), link, sizeof link - 1);
      if (n <= 0) continue;
      link[n] = '\0';
      int h = -1;
      int g = -1;
      if (!parse_memfd_link(p, link, h, g) || h != host || g != gpu) continue;
      struct stat st{};
      if (::stat(path.c_str(), &st) != 0 || !counted.insert(st.st_ino).second) continue;
      bytes += static_cast<uint64_t>(st.st_size);
    }
    ::closedir(fds);
  }
  return bytes;
}

WorldLock::WorldLock(const Process& p) : fd_(p.world_fd) {
  while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
  }
}

WorldLock::~WorldLock() { ::flock(fd_, LOCK_UN); }

FaultOutcome visit_fault(const Process& p, const char* site) {
  static std::mutex mutex;
  static std::vector<int> calls;  // per armed fault: calls seen at its site
  std::lock_guard lock(mutex);
  calls.resize(p.world.faults.size(), 0);
  const bool import_call = std::strcmp(site, "import") == 0;
  FaultOutcome outcome = FaultOutcome::kProceed;
  for (size_t i = 0; i < p.world.faults.size(); ++i) {
    const WorldFault& f = p.world.faults[i];
    const bool here = f.site == site || (import_call && (f.site == "hang" || f.site == "slow"));
    if (!here || (f.rank >= 0 && f.rank != p.rank)) continue;
    const int call = ++calls[i];
    if (f.nth != 0 && call != f.nth) continue;
    say("fault '" + f.site + "' fired on rank " + std::to_string(p.rank) + " (call " + std::to_string(call) + ")");
    if (f.site == "hang") {
      // A peer whose access was never granted hangs on real hardware; here
      // the call blocks until the launcher's grace runs out and kills us.
      for (;;) ::pause();
    }
    if (f.site == "slow") {
      std::this_thread::sleep_for(std::chrono::milliseconds(f.delay_ms));
      continue;
    }
    outcome = FaultOutcome::kFail;
  }
  return outcome;
}

}  // namespace engram::emulated
