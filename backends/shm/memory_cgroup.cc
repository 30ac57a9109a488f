#include "backends/shm/memory_cgroup.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace engram::shm {
namespace {

std::optional<std::string> read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

// "max" (v2) and v1's page-rounded LLONG_MAX both mean no limit.
std::optional<uint64_t> limit_value(const std::string& text) {
  if (text == "max") return std::nullopt;
  try {
    const uint64_t v = std::stoull(text);
    if (v >= (uint64_t{1} << 62)) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

struct Hierarchy {
  std::string mount_point;  // where the hierarchy is mounted
  std::string root;         // the cgroup path the mount shows at its root
  std::string own_path;     // this process's cgroup path in it
  bool v2 = false;
};

// Finds the memory hierarchy: a cgroup2 mount whose root lists "memory" in
// cgroup.controllers, else a cgroup (v1) mount with the memory option.
std::optional<Hierarchy> memory_hierarchy() {
  std::string v1_path, v2_path;
  bool have_v1 = false, have_v2 = false;
  {
    std::ifstream in("/proc/self/cgroup");
    std::string line;
    while (std::getline(in, line)) {
      // id:controllers:path
      const size_t a = line.find(':');
      const size_t b = line.find(':', a + 1);
      if (a == std::string::npos || b == std::string::npos) continue;
      const std::string controllers = line.substr(a + 1, b - a - 1);
      const std::string path = line.substr(b + 1);
      if (line.compare(0, a, "0") == 0 && controllers.empty()) {
        v2_path = path;
        have_v2 = true;
      }
      std::stringstream list(controllers);
      std::string c;
      while (std::getline(list, c, ','))
        if (c == "memory") {
          v1_path = path;
          have_v1 = true;
        }
    }
  }
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  std::optional<Hierarchy> v1;
  while (std::getline(in, line)) {
    // id parent major:minor root mount_point options ... - fstype source super_options
    std::stringstream fields(line);
    std::string id, parent, dev, root, mount_point;
    fields >> id >> parent >> dev >> root >> mount_point;
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::stringstream tail(line.substr(dash + 3));
    std::string fstype, source, super_options;
    tail >> fstype >> source >> super_options;
    if (fstype == "cgroup2" && have_v2) {
      const auto controllers = read_first_line(mount_point + "/cgroup.controllers");
      if (controllers && (" " + *controllers + " ").find(" memory ") != std::string::npos)
        return Hierarchy{mount_point, root, v2_path, true};
    }
    if (fstype == "cgroup" && have_v1 && ("," + super_options + ",").find(",memory,") != std::string::npos)
      v1 = Hierarchy{mount_point, root, v1_path, false};
  }
  return v1;
}

}  // namespace

Result<std::optional<MemoryCgroup>> this_process_memory_cgroup() {
  const std::optional<Hierarchy> h = memory_hierarchy();
  if (!h) return std::optional<MemoryCgroup>();
  // The process's path relative to what the mount shows.
  std::string relative = h->own_path;
  if (h->root != "/" && relative.compare(0, h->root.size(), h->root) == 0) relative = relative.substr(h->root.size());
  std::filesystem::path dir = std::filesystem::path(h->mount_point) / std::filesystem::path(relative).relative_path();
  const std::string limit_file = h->v2 ? "memory.max" : "memory.limit_in_bytes";
  const std::string usage_file = h->v2 ? "memory.current" : "memory.usage_in_bytes";
  std::optional<MemoryCgroup> tightest;
  // Walk up to the mount point: the smallest headroom on the way limits us.
  for (;;) {
    if (auto limit_text = read_first_line((dir / limit_file).string())) {
      if (auto limit = limit_value(*limit_text)) {
        const auto usage_text = read_first_line((dir / usage_file).string());
        if (!usage_text)
          return unavailable(fmt::format("{} sets a memory limit but {} cannot be read", (dir / limit_file).string(),
                                         (dir / usage_file).string()));
        MemoryCgroup here{dir.string(), *limit, std::stoull(*usage_text)};
        if (!tightest || here.headroom_bytes() < tightest->headroom_bytes()) tightest = here;
      }
    }
    if (dir == std::filesystem::path(h->mount_point) || !dir.has_parent_path() || dir.parent_path() == dir) break;
    dir = dir.parent_path();
  }
  return tightest;
}

}  // namespace engram::shm
