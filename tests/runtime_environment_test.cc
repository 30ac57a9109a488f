// Which environment a host is, from the files each one leaves (a fake tree
// per case), and the progress line long work writes on stderr.
#include "backends/ipc/runtime_environment_probe.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "core/base/progress.h"

namespace engram {
namespace {

namespace fs = std::filesystem;

class FakeRoot : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/engramlab-envtest-XXXXXX";
    root_ = ::mkdtemp(templ);
    fs::create_directories(root_ + "/proc/1");
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& path, const std::string& text) const {
    fs::create_directories(fs::path(root_ + "/" + path).parent_path());
    std::ofstream(root_ + "/" + path) << text;
  }
  RuntimeEnvironment detect(bool kubernetes_env = false) const {
    return ipc::detect_runtime_environment({.root = root_, .kubernetes_env = kubernetes_env});
  }
  std::string root_;
};

TEST_F(FakeRoot, BareHostByDefault) {
  write("proc/1/cgroup", "0::/init.scope\n");
  EXPECT_EQ(detect(), RuntimeEnvironment::kBareMetal);
}

TEST_F(FakeRoot, DockerAndPodmanContainers) {
  write(".dockerenv", "");
  EXPECT_EQ(detect(), RuntimeEnvironment::kDocker);
  fs::remove(root_ + "/.dockerenv");
  write("run/.containerenv", "");
  EXPECT_EQ(detect(), RuntimeEnvironment::kDocker);
  fs::remove(root_ + "/run/.containerenv");
  write("proc/1/cgroup", "0::/system.slice/docker-4f1e.scope\n");
  EXPECT_EQ(detect(), RuntimeEnvironment::kDocker);
}

TEST_F(FakeRoot, KubernetesPods) {
  EXPECT_EQ(detect(true), RuntimeEnvironment::kKubernetes);
  write("var/run/secrets/kubernetes.io/serviceaccount/token", "x");
  write(".dockerenv", "");  // a pod's container is a container too: Kubernetes' fix applies
  EXPECT_EQ(detect(), RuntimeEnvironment::kKubernetes);
  fs::remove_all(root_ + "/var");
  fs::remove(root_ + "/.dockerenv");
  write("proc/1/cgroup", "0::/kubepods/besteffort/pod1/abc\n");
  EXPECT_EQ(detect(), RuntimeEnvironment::kKubernetes);
}

TEST(RuntimeEnvironmentNames, RoundTrip) {
  for (RuntimeEnvironment e : {RuntimeEnvironment::kUnknown, RuntimeEnvironment::kBareMetal,
                               RuntimeEnvironment::kDocker, RuntimeEnvironment::kKubernetes}) {
    EXPECT_EQ(parse_runtime_environment(runtime_environment_name(e), "x").value(), e);
  }
  auto bad = parse_runtime_environment("vm", "hosts[0].environment");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("hosts[0].environment: 'vm'"), std::string::npos);
}

std::string read_all(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, n);
  return text;
}

TEST(Progress, QuietForShortWorkThenPlainLinesInALog) {
  FILE* log = std::tmpfile();
  ASSERT_NE(log, nullptr);
  {
    Progress quick("fuzz", "seeds", 10, ProgressMode::kAlways, log);  // default: quiet for 2 s
    for (uint64_t i = 1; i <= 10; ++i) quick.update(i);
    EXPECT_EQ(quick.lines_written(), 0);
  }
  EXPECT_EQ(read_all(log), "");
  {
    Progress slow("fuzz", "seeds", 4, ProgressMode::kAlways, log);
    slow.set_timing(std::chrono::milliseconds(0), std::chrono::milliseconds(0));
    for (uint64_t i = 1; i <= 4; ++i) slow.update(i);
    EXPECT_EQ(slow.lines_written(), 4);
  }
  const std::string text = read_all(log);
  EXPECT_NE(text.find("fuzz: 1 of 4 seeds (25%)"), std::string::npos) << text;
  EXPECT_NE(text.find("fuzz: 4 of 4 seeds (100%)"), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << "a file gets whole lines, no redraws";
  std::fclose(log);
}

TEST(Progress, AutoStaysQuietWhenNotATerminalUnlessAsked) {
  FILE* log = std::tmpfile();
  ::unsetenv("ENGRAMLAB_PROGRESS");
  Progress quiet("x", "items", 1, ProgressMode::kAuto, log);
  EXPECT_FALSE(quiet.enabled());
  ::setenv("ENGRAMLAB_PROGRESS", "1", 1);
  Progress asked("x", "items", 1, ProgressMode::kAuto, log);
  EXPECT_TRUE(asked.enabled());
  ::unsetenv("ENGRAMLAB_PROGRESS");
  Progress never("x", "items", 1, ProgressMode::kNever, log);
  EXPECT_FALSE(never.enabled());
  std::fclose(log);
}

}  // namespace
}  // namespace engram

namespace engram {
namespace {

TEST(Progress, TicksThroughOneLongItem) {
  FILE* log = std::tmpfile();
  {
    Progress p("scenario run", "scenarios", 1, ProgressMode::kAlways, log);
    p.set_timing(std::chrono::milliseconds(0), std::chrono::milliseconds(20));
    p.set_item("nvl72_16_racks");
    p.keep_ticking();
    // The one item, still running: the ticker alone draws past the first
    // line (waited for, with a deadline far beyond its 20 ms period).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (p.lines_written() < 2 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_GE(p.lines_written(), 2);
    p.update(1);
  }
  const std::string text = read_all(log);
  EXPECT_NE(text.find("scenario run: 0 of 1 scenarios (0%), now nvl72_16_racks"), std::string::npos) << text;
  std::fclose(log);
}

}  // namespace
}  // namespace engram
