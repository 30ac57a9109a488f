// The handle exchange of whole racks on real processes over the emulated CUDA
// driver (backends/emulated_driver): `engramlab launch --emulate-driver` starts
// every rank of the deployment, each runs the real backend's exchange
// (tests/emulated_rank_worker_main.cc) and reads the first 4 KiB of every
// peer's shard through its mapping. Prints one row per world: ranks, handle
// type, ranks that exchanged, wall time of the whole job (start to last exit)
// and the CPU time its processes used (user + system): on a shared machine the
// wall time measures the neighbours too, the CPU time bounds what 2 idle cores
// need (cpu_s / 2).
//
//   emulated_rack_exchange [--bytes N]     (default 2 MiB a rank)
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

struct World {
  const char* name;
  const char* yaml;
  int ranks;
};

const World kWorlds[] = {
    {"1 B300 host", "hosts:\n  - {name: b300-0, gpus: 8, gpu_model: B300}\nlayout: {tp: 8, dp: 1}\n", 8},
    {"2 GB300 nodes", "hosts:\n  - {name: gb300, count: 2, gpus: 4, gpu_model: GB300, nvlink_domain: nvl-a, "
                      "imex_channel: true, fabric_attribute: true}\nlayout: {tp: 8, dp: 1}\n", 8},
    {"NVL72 rack", "hosts:\n  - {name: nvl72-node, count: 18, gpus: 4, gpu_model: GB300, nvlink_domain: nvl72-rack0, "
                   "imex_channel: true, fabric_attribute: true}\nlayout: {tp: 72, dp: 1}\n", 72},
};

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  std::string bytes = "2097152";
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--bytes") bytes = argv[i + 1];
  char dir[] = "/tmp/engramlab-emurack-XXXXXX";
  if (::mkdtemp(dir) == nullptr) return 1;
  std::printf("%-14s %6s %10s %10s %9s %9s\n", "world", "ranks", "handle", "exchanged", "wall_s", "cpu_s");
  int failed = 0;
  for (const World& w : kWorlds) {
    const std::string dep = std::string(dir) + "/dep.yaml";
    std::ofstream(dep) << w.yaml;
    const std::string command = fmt::format(
        "{0}/apps/engramlab launch --no-rank-prefix --emulate-driver {1} -- {0}/tests/emulated_rank_worker exchange "
        "--bytes {2} --check-bytes 4096 2>&1",
        ENGRAM_BINARY_DIR, dep, bytes);
    rusage before{};
    ::getrusage(RUSAGE_CHILDREN, &before);
    const auto start = std::chrono::steady_clock::now();
    std::string output;
    FILE* pipe = ::popen(command.c_str(), "r");
    char buf[4096];
    while (pipe != nullptr && std::fgets(buf, sizeof buf, pipe) != nullptr) output += buf;
    const int status = pipe != nullptr ? ::pclose(pipe) : -1;
    const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rusage after{};
    ::getrusage(RUSAGE_CHILDREN, &after);
    auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
    const double cpu_s = seconds(after.ru_utime) + seconds(after.ru_stime) - seconds(before.ru_utime) -
                         seconds(before.ru_stime);
    const int ok = count_of(output, "EXCHANGE OK");
    const char* handle = count_of(output, "handle fabric") ? "fabric" : count_of(output, "handle posix_fd") ? "posix_fd" : "-";
    std::printf("%-14s %6d %10s %5d/%-4d %9.2f %9.2f\n", w.name, w.ranks, handle, ok, w.ranks, wall_s, cpu_s);
    if (status != 0 || ok != w.ranks) {
      ++failed;
      std::fprintf(stderr, "%s failed:\n%s\n", w.name, output.c_str());
    }
  }
  std::remove((std::string(dir) + "/dep.yaml").c_str());
  ::rmdir(dir);
  return failed == 0 ? 0 : 1;
}
