// Output safe for terminals and shells: whatever bytes a host name, an
// address, a directory or a file name holds, engramlab prints no control
// character raw and no value whole past a line; the commands it prints to
// paste (`reproduce:`) quote every word; and memory sizes of 0 bytes are
// refused where they mean nothing, and honoured as limits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/base/shell_quote.h"
#include "core/base/text_excerpt.h"
#include "core/deployment_file/deployment_yaml.h"
#include "sim/world.h"
#include "tests/process_run.h"

namespace engram {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kEngramlab = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab";
const std::string kScenarios = std::string(ENGRAM_SOURCE_DIR) + "/scenarios";

bool has_raw_control(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) return true;
    if (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(text[i + 1]) < 0xA0)
      return true;
  }
  return false;
}

TEST(TerminalSafe, ExcerptsEscapeC0DelAndC1Controls) {
  EXPECT_EQ(excerpt("a\x1b]0;title\x07z"), "a\\x1b]0;title\\x07z");
  EXPECT_EQ(excerpt("csi\xc2\x9b" "31m"), "csi\\xc2\\x9b31m");
  EXPECT_EQ(excerpt("caf\xc3\xa9"), "caf\xc3\xa9");  // printable UTF-8 stays
  EXPECT_EQ(excerpt(std::string(100000, 'x')).size(), 64 + std::string("... (100000 bytes)").size());
  EXPECT_TRUE(has_control_characters("a\rb"));
  EXPECT_TRUE(has_control_characters("\xc2\x85"));
  EXPECT_FALSE(has_control_characters("h200-0.example"));
}

// Issue 50, item 13: Unicode bidi controls reorder what a terminal shows
// (U+202E makes "h200-0\u202e1-tsoh" display as another name): escaped like
// the C0/C1 controls, and a host name holding one is refused; a YAML syntax
// error and fuzz --sites echo no raw ESC.
TEST(TerminalSafe, BidiControlsAndEscInYamlErrorsAndSitesAreEscaped) {
  EXPECT_EQ(excerpt("h200\u202e0-a"), "h200\\u{202e}0-a");
  for (const char* bidi : {"\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068",
                           "\u2069", "\u200e", "\u200f", "\u061c"}) {
    EXPECT_TRUE(has_control_characters(std::string("a") + bidi)) << excerpt(bidi);
    EXPECT_EQ(excerpt(std::string("a") + bidi).find(bidi), std::string::npos);
  }
  EXPECT_FALSE(has_control_characters("caf\xc3\xa9 \xe2\x80\x94 dash"));  // an em dash is no control

  auto host = parse_deployment_text("hosts: [{name: \"h200\u202e0\", gpus: 1}]\nlayout: {tp: 1}\n", "d.yaml");
  ASSERT_FALSE(host.is_ok());
  EXPECT_THAT(host.status().message(), HasSubstr("h200\\u{202e}0"));
  EXPECT_THAT(host.status().message(), Not(HasSubstr("\u202e")));

  auto syntax = parse_deployment_text("hosts: [\"a\x1b[2J\n", "d.yaml");
  ASSERT_FALSE(syntax.is_ok());
  EXPECT_FALSE(has_raw_control(syntax.status().message())) << excerpt(syntax.status().message(), 400);

  const testing::ProcessRun sites = testing::run(kEngramlab + " fuzz --seeds 1 --sites \"$(printf 'imp\\033[2Jort')\"");
  EXPECT_EQ(sites.exit_code, 2) << sites.output;
  EXPECT_FALSE(has_raw_control(sites.output)) << excerpt(sites.output, 400);
  EXPECT_THAT(sites.output, HasSubstr("imp\\x1b[2Jort"));
}

// Plain and single-quoted words: tests/shell_quote_test.cc. Here: control
// characters, which a terminal would act on.
TEST(TerminalSafe, ShellWordsReadBackAsThemselves) {
  EXPECT_EQ(shell_quote("a\nb\x1b"), "$'a\\x0ab\\x1b'");
  for (const std::string word : {"a b;echo PWNED.yaml", "it's $(id) `id`", "tab\there", "nl\nesc\x1b!"}) {
    const std::string script = "printf '%s' " + shell_quote(word);
    const std::string path = "/tmp/engramlab-shellword-" + std::to_string(::getpid()) + ".sh";
    std::ofstream(path) << script;
    FILE* pipe = ::popen(("bash " + path).c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string back;
    char buf[256];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) back.append(buf, n);
    ::pclose(pipe);
    fs::remove(path);
    EXPECT_EQ(back, word) << script;
  }
}

// A failing scenario in a file named `a b;echo PWNED.yaml`: its reproduce
// line, pasted into a shell, runs engramlab on that file and nothing else.
TEST(TerminalSafe, TheReproduceLineIsShellQuoted) {
  char templ[] = "/tmp/engramlab-repro-XXXXXX";
  const std::string dir = ::mkdtemp(templ);
  const std::string file = dir + "/a b;echo PWNED.yaml";
  std::ofstream(file) << "hosts:\n  - {name: h200-0, gpus: 4, gpu_model: H200, shm_size: 190GiB}\n"
                         "layout: {tp: 4, dp: 1}\nconfig: {cpu_offload: true}\nseed: 3\n"
                         "expect: {placement: device_peer}\n";  // wrong on purpose: it fails
  const testing::ProcessRun r = testing::run(kEngramlab + " scenario run " + shell_quote(file));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const size_t at = r.output.find("reproduce: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string line = r.output.substr(at + 11, r.output.find('\n', at) - at - 11);
  // The running binary's absolute path, then the quoted file.
  EXPECT_EQ(line, shell_quote(fs::canonical(kEngramlab).string()) + " scenario run " + shell_quote(file) + " --seed 3")
      << line;
  // Pasted: the scenario runs again, no `echo`.
  const testing::ProcessRun pasted = testing::run(line);
  EXPECT_EQ(pasted.exit_code, 1) << pasted.output;
  EXPECT_THAT(pasted.output, Not(HasSubstr("\nPWNED"))) << pasted.output;
  EXPECT_THAT(pasted.output, HasSubstr("FAIL a b;echo PWNED")) << pasted.output;
  fs::remove_all(dir);
}

TEST(TerminalSafe, AHostNameWithControlCharactersIsRefusedEscaped) {
  auto d = parse_deployment_text("hosts:\n  - {name: \"gb\\e]0;owned\\a\", gpus: 4, gpu_model: GB200}\n"
                                 "layout: {tp: 1, dp: 4}\n",
                                 "hosts.yaml");
  ASSERT_FALSE(d.is_ok());
  EXPECT_THAT(d.status().message(), HasSubstr("hosts[0].name: 'gb\\x1b]0;owned\\x07' holds control characters"));
  EXPECT_FALSE(has_raw_control(d.status().message()));
}

TEST(TerminalSafe, AddressesAndDirectoriesFromTheEnvironmentAreCheckedAndEscaped) {
  // popen's sh has no $'...': printf makes the bytes.
  const testing::ProcessRun addr =
      testing::run(kEngramlab + " launch --master-addr \"$(printf '10.0.0.1\\033[2J\\r')\" -n 1 -- true");
  EXPECT_EQ(addr.exit_code, 2) << addr.output;
  EXPECT_THAT(addr.output, HasSubstr("--master-addr='10.0.0.1\\x1b[2J\\x0d' is not a host name or IP address"));
  EXPECT_FALSE(has_raw_control(addr.output)) << addr.output;

  // One rank, so the scenario's layout fits and the environment is read.
  char templ[] = "/tmp/engramlab-tsafe-XXXXXX";
  const std::string dir = ::mkdtemp(templ);
  const std::string file = dir + "/one.yaml";
  std::ofstream(file) << "hosts:\n  - {name: n0, gpus: 1, gpu_model: H200}\nlayout: {tp: 1, dp: 1}\n"
                         "config: {cpu_offload: true}\nexpect: {placement: host_private}\n";
  const std::string rank_env = "env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_PORT=29999 ENGRAMLAB_JOB_ID=tsafe "
                               "ENGRAMLAB_JOB_TOKEN=0123456789abcdef0123 ";
  const testing::ProcessRun rank =
      testing::run(rank_env + "MASTER_ADDR=\"$(printf 'evil\\nrank 3: SELFTEST OK')\" " + kEngramlab +
                   " scenario rank " + file);
  EXPECT_NE(rank.exit_code, 0) << rank.output;
  EXPECT_THAT(rank.output, HasSubstr("MASTER_ADDR='evil\\nrank 3: SELFTEST OK' is not a host name"));
  EXPECT_THAT(rank.output, Not(HasSubstr("\nrank 3: SELFTEST OK"))) << "a forged line";

  const testing::ProcessRun shm =
      testing::run(rank_env + "MASTER_ADDR=127.0.0.1 ENGRAMLAB_SHM_DIR=\"$(printf '/dev/shm/\\033]2;x\\007')\" " +
                   kEngramlab + " scenario rank " + file);
  EXPECT_NE(shm.exit_code, 0) << shm.output;
  EXPECT_THAT(shm.output, HasSubstr("ENGRAMLAB_SHM_DIR='/dev/shm/\\x1b]2;x\\x07' is not a usable directory name"));
  EXPECT_FALSE(has_raw_control(shm.output)) << shm.output;
  fs::remove_all(dir);
}

TEST(ZeroBytes, AnExplicitZeroGpuOrHostMemoryIsRefused) {
  for (const char* field : {"gpu_memory", "host_memory"}) {
    auto d = parse_deployment_text(std::string("hosts:\n  - {name: n0, gpus: 4, gpu_model: H200, ") + field +
                                       ": 0B}\nlayout: {tp: 1, dp: 4}\n",
                                   "zero.yaml");
    ASSERT_FALSE(d.is_ok()) << field;
    EXPECT_THAT(d.status().message(), HasSubstr(std::string("hosts[0].") + field + ": '0B' is no memory"));
  }
  const testing::ProcessRun flag = testing::run(kEngramlab + " plan --gpu-model H200 --gpu-memory 0B --tp 1 --dp 1");
  EXPECT_EQ(flag.exit_code, 2) << flag.output;
  EXPECT_THAT(flag.output, HasSubstr("--gpu-memory 0B: that is no memory"));
  EXPECT_THAT(flag.output, Not(HasSubstr("not written by you")));
}

// A limit of 0 bytes is a limit: every fill is refused, naming it, where 0
// used to mean "no limit".
TEST(ZeroBytes, AZeroByteLimitIsHonouredAndNamed) {
  auto d = parse_deployment_text("hosts:\n  - {name: n0, gpus: 1, gpu_model: H200, memory_limit_per_rank: 0B, "
                                 "shm_size_limit: 0B}\nlayout: {tp: 1, dp: 1}\n",
                                 "limits.yaml");
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  ASSERT_TRUE(d->hosts[0].memory_limit_bytes_per_rank.has_value());
  EXPECT_EQ(*d->hosts[0].memory_limit_bytes_per_rank, 0u);
  ASSERT_TRUE(d->hosts[0].tmpfs_bytes_enforced.has_value());
  for (bool cgroup : {true, false}) {
    sim::WorldSpec spec;
    spec.hosts = sim::plain_hosts("node-", 1, 1, "H200");
    spec.hosts[0].tmpfs_bytes_total = 24ull << 30;
    if (cgroup) spec.hosts[0].memory_limit_bytes_per_rank = 0;
    else spec.hosts[0].tmpfs_bytes_enforced = 0;
    Status created;
    auto run = sim::run_world(spec, [&](RankBackend& b) -> Status {
      created = b.shm->create("engramlab-job-layer1", 4096).status();
      return Status::ok();
    });
    ASSERT_TRUE(run.is_ok());
    EXPECT_EQ(created.code(), ErrorCode::kResourceExhausted) << created.to_string();
    EXPECT_THAT(created.message(), HasSubstr(cgroup ? "memory cgroup" : "may be used")) << created.message();
  }
}

}  // namespace
}  // namespace engram
