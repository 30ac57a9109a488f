// Two "hosts" on one machine for tests (tools/netns/two_hosts.sh): each rank
// in its own network, mount and UTS namespace (hostA and hostB), a private
// tmpfs on the socket dir and the shm dir, a veth pair for TCP. Needs root
// and namespaces; two_host_namespaces_unavailable() says why not, for a
// visible skip.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace engram::testing {

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Why two-host namespaces cannot be built here, or "" when they can.
inline std::string two_host_namespaces_unavailable() {
  if (::geteuid() != 0) return "needs root (unshare --net --mount --uts, mount, ip link)";
  if (std::system("command -v unshare >/dev/null 2>&1 && command -v ip >/dev/null 2>&1") != 0) {
    return "unshare(1) or ip(8) is not installed";
  }
  if (std::system("unshare --net --mount --uts --propagation private sh -c "
                  "'hostname probe && ip link add probeA type veth peer name probeB' >/dev/null 2>&1") != 0) {
    return "creating net/mount/UTS namespaces or a veth pair is not permitted here";
  }
  return "";
}

struct TwoHostRun {
  int status = -1;     // std::system's
  std::string a, b;    // what each side printed
};

// `worker` on hostA (rank 0) and hostB (rank 1) with `launcher`'s
// environment (two_hosts.sh: plain, torchrun, slurm, ompi, engramlab); it
// gets `--socket-dir DIR --shm-dir DIR` appended.
inline TwoHostRun run_two_hosts(const std::string& launcher, const std::string& worker) {
  char templ[] = "/tmp/engramlab-twohosts-XXXXXX";
  const std::string work = ::mkdtemp(templ);
  const std::string command = "LAUNCHER=" + launcher + " MASTER_PORT=" + std::to_string(20000 + ::getpid() % 9000) +
                              " sh " + ENGRAM_SOURCE_DIR + "/tools/netns/two_hosts.sh " + work + " " + worker + " 2>&1";
  TwoHostRun r;
  r.status = std::system(command.c_str());
  r.a = slurp(work + "/out-hostA");
  r.b = slurp(work + "/out-hostB");
  std::filesystem::remove_all(work);
  return r;
}

}  // namespace engram::testing
