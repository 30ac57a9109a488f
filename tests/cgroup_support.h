// A cgroup of its own for one test (a memory or pids limit on a child
// process): under a cgroup v2 mount whose new groups get the controller's
// files, else a v1 mount of that controller. Removed when it goes. Tests
// skip visibly, with the reason, where none can be made (no root, no
// controller, a read-only /sys/fs/cgroup).
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

namespace engram::testing {

class TestCgroup {
 public:
  // controller "memory" or "pids". On failure, `why` says what was missing.
  static std::optional<TestCgroup> create(const std::string& controller, std::string& why) {
    std::ifstream mounts("/proc/self/mountinfo");
    std::string line, v1_mount, v2_mount;
    while (std::getline(mounts, line)) {
      const size_t dash = line.find(" - ");
      if (dash == std::string::npos) continue;
      std::stringstream head(line), tail(line.substr(dash + 3));
      std::string id, parent, dev, root, mount_point, fstype, source, options;
      head >> id >> parent >> dev >> root >> mount_point;
      tail >> fstype >> source >> options;
      if (fstype == "cgroup2" && v2_mount.empty()) v2_mount = mount_point;
      if (fstype == "cgroup" && ("," + options + ",").find("," + controller + ",") != std::string::npos)
        v1_mount = mount_point;
    }
    const std::string name = "engramlab-test-" + std::to_string(::getpid()) + "-" + controller;
    const std::string limit_file = controller == "memory" ? "memory.max" : "pids.max";
    for (const auto& [mount, v2] : {std::pair{v2_mount, true}, std::pair{v1_mount, false}}) {
      if (mount.empty()) continue;
      const std::string dir = mount + "/" + name;
      if (::mkdir(dir.c_str(), 0755) != 0) {
        why += "cannot create " + dir + " (" + std::to_string(errno) + "); ";
        continue;
      }
      const std::string file = v2 ? limit_file : (controller == "memory" ? "memory.limit_in_bytes" : "pids.max");
      struct stat st{};
      if (::stat((dir + "/" + file).c_str(), &st) != 0) {
        ::rmdir(dir.c_str());
        why += mount + " gives a new group no " + file + "; ";
        continue;
      }
      return TestCgroup(dir, file, v2);
    }
    if (v2_mount.empty() && v1_mount.empty()) why += "no cgroup mount with the " + controller + " controller";
    return std::nullopt;
  }

  TestCgroup(TestCgroup&& o) noexcept : dir_(std::move(o.dir_)), limit_file_(o.limit_file_), v2_(o.v2_) {
    o.dir_.clear();
  }
  TestCgroup(const TestCgroup&) = delete;
  ~TestCgroup() {
    if (dir_.empty()) return;
    // The group empties once its processes are reaped; rmdir may need a moment.
    for (int i = 0; i < 50 && ::rmdir(dir_.c_str()) != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  const std::string& dir() const { return dir_; }
  bool v2() const { return v2_; }
  bool set_limit(const std::string& value) const { return write(limit_file_, value); }
  // Moves `pid` into the group (a child calls it with its own pid before it runs the work).
  bool add(pid_t pid) const { return write("cgroup.procs", std::to_string(pid)); }

 private:
  TestCgroup(std::string dir, std::string limit_file, bool v2)
      : dir_(std::move(dir)), limit_file_(std::move(limit_file)), v2_(v2) {}
  bool write(const std::string& file, const std::string& value) const {
    std::ofstream out(dir_ + "/" + file);
    out << value;
    out.flush();
    return static_cast<bool>(out);
  }

  std::string dir_;
  std::string limit_file_;
  bool v2_ = false;
};

}  // namespace engram::testing
