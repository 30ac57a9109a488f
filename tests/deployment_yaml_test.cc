#include "core/deployment_file/deployment_yaml.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "core/plan/deployment_plan.h"
#include "core/base/units.h"
#include "tests/golden_messages.h"

namespace engram {
namespace {

using ::engram::testing::golden_message;

using ::testing::AllOf;
using ::testing::HasSubstr;

Status parse_error(std::string_view text) {
  auto r = parse_deployment_text(text, "d.yaml");
  EXPECT_FALSE(r.is_ok()) << text;
  if (r.is_ok()) return Status::ok();
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  return r.status();
}

TEST(DeploymentYaml, ParsesEveryField) {
  auto r = parse_deployment_text(R"(
model: tiny
hosts:
  - name: tray
    count: 2
    boot_id: boot
    gpus: 4
    gpu_model: GB200
    gpu_memory: 180GiB
    shm_size: 190GiB
    nvlink_domain: nvl72-a
    imex_channel: true
    fabric_attribute: true
    visible_gpus_per_rank: 1
  - {name: solo, gpus: 2, shm_size: none}
rank_hosts: [0, tray-1, 2, 2, 0, 1, 0, 1, 1, 0]
layout: {tp: 2, dp: 5, ep: 2, elastic_ep: false, prefill_cp: 2}
config: {cpu_offload: true, peer_shards: false, dp_shared_memory: false, shard_group: nvlink_domain,
         tokens_per_rank_max: 256}
)", "d.yaml");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Deployment& d = r.value();
  EXPECT_EQ(d.model, "tiny");
  ASSERT_EQ(d.hosts.size(), 3u);
  EXPECT_EQ(d.hosts[0].name, "tray-0");
  EXPECT_EQ(d.hosts[1].name, "tray-1");
  EXPECT_EQ(d.hosts[1].boot_id, "boot-1");
  EXPECT_EQ(d.hosts[0].gpu_count, 4);
  EXPECT_EQ(d.hosts[0].gpu_model, "GB200");
  EXPECT_EQ(d.hosts[0].gpu_memory_bytes, 180 * kGiB);
  EXPECT_EQ(d.hosts[0].tmpfs_bytes_total, 190 * kGiB);
  EXPECT_TRUE(d.hosts[0].shm_mounted);
  EXPECT_EQ(d.hosts[0].nvlink_domain, "nvl72-a");
  EXPECT_TRUE(d.hosts[0].imex_channel);
  EXPECT_TRUE(d.hosts[0].fabric_attribute);
  EXPECT_EQ(d.hosts[0].visible_gpus_per_rank, 1);
  EXPECT_EQ(d.hosts[2].name, "solo");
  EXPECT_FALSE(d.hosts[2].shm_mounted);
  EXPECT_EQ(d.rank_hosts, (std::vector<int>{0, 1, 2, 2, 0, 1, 0, 1, 1, 0}));
  EXPECT_EQ(d.layout.tp, 2);
  EXPECT_EQ(d.layout.dp, 5);
  EXPECT_EQ(d.layout.ep, 2);
  EXPECT_EQ(d.layout.prefill_cp, 2);
  EXPECT_TRUE(d.config.cpu_offload);
  EXPECT_EQ(d.config.dp_shared_memory, std::optional<bool>(false));
  EXPECT_EQ(d.config.shard_group, ShardGroup::kNvlinkDomain);
  EXPECT_EQ(d.config.tokens_per_rank_max, 256);
}

TEST(DeploymentYaml, DefaultsAreDockerShmAndUnset) {
  auto r = parse_deployment_text("hosts: [{name: a, gpus: 8}]\nconfig: {dp_shared_memory: unset}\n", "d.yaml");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->hosts[0].tmpfs_bytes_total, 64 * kMiB);
  EXPECT_TRUE(r->hosts[0].shm_mounted);
  EXPECT_FALSE(r->config.dp_shared_memory.has_value());
  EXPECT_EQ(r->model, "deepseek-v4.1-flash");
  EXPECT_TRUE(r->rank_hosts.empty());
}

TEST(DeploymentYaml, UnknownFieldNamesLineColumnPathAndKnownFields) {
  Status s = parse_error("hosts:\n  - name: a\n    gpus: 4\n    shm: 1GiB\n");
  EXPECT_THAT(s.message(), AllOf(HasSubstr("d.yaml: line 4, column 5"), HasSubstr("hosts[0].shm"),
                                 HasSubstr("unknown field 'shm'"), HasSubstr("shm_size")));
  Status top = parse_error("hosts: [{name: a, gpus: 1}]\ntopology: {}\n");
  EXPECT_THAT(top.message(), AllOf(HasSubstr("line 2, column 1"), HasSubstr("topology")));
  Status cfg = parse_error("hosts: [{name: a, gpus: 1}]\nconfig:\n  cpu_ofload: true\n");
  EXPECT_THAT(cfg.message(), AllOf(HasSubstr("line 3, column 3"), HasSubstr("config.cpu_ofload"),
                                   HasSubstr("cpu_offload")));
}

TEST(DeploymentYaml, BadValuesNameLineColumnValueAndFix) {
  Status gpus = parse_error("hosts:\n  - {name: a, gpus: four}\n");
  EXPECT_THAT(gpus.message(), AllOf(HasSubstr("line 2, column 21"), HasSubstr("hosts[0].gpus"), HasSubstr("'four'"),
                                    HasSubstr("whole number")));
  Status neg = parse_error("hosts:\n  - {name: a, gpus: 1, shm_size: -5GiB}\n");
  EXPECT_THAT(neg.message(), AllOf(HasSubstr("line 2, column 34"), HasSubstr("hosts[0].shm_size"),
                                   HasSubstr("-5GiB"), HasSubstr("negative")));
  Status unit = parse_error("hosts:\n  - {name: a, gpus: 1, gpu_memory: 80GiBs}\n");
  EXPECT_THAT(unit.message(), AllOf(HasSubstr("hosts[0].gpu_memory"), HasSubstr(golden_message("size.unknown_unit"))));
  Status zero = parse_error("hosts: [{name: a, gpus: 1}]\nlayout: {tp: 0}\n");
  EXPECT_THAT(zero.message(), AllOf(HasSubstr("line 2, column 14"), HasSubstr("layout.tp"),
                                    HasSubstr("'0' is not a whole number in [1, 1048576]")));
  Status negative_dp = parse_error("hosts: [{name: a, gpus: 1}]\nlayout: {dp: -2}\n");
  EXPECT_THAT(negative_dp.message(), HasSubstr("layout.dp: '-2' is not a whole number in [1, 1048576]"));
  Status tri = parse_error("hosts: [{name: a, gpus: 1}]\nconfig: {dp_shared_memory: maybe}\n");
  EXPECT_THAT(tri.message(), AllOf(HasSubstr("config.dp_shared_memory"), HasSubstr("'maybe'"),
                                   HasSubstr("true, false or unset")));
  Status group = parse_error("hosts: [{name: a, gpus: 1}]\nconfig: {shard_group: rack}\n");
  EXPECT_THAT(group.message(), AllOf(HasSubstr("config.shard_group"), HasSubstr("'rack'"), HasSubstr("nvlink_domain")));
  Status flag = parse_error("hosts: [{name: a, gpus: 1, imex_channel: perhaps}]\n");
  EXPECT_THAT(flag.message(), AllOf(HasSubstr("hosts[0].imex_channel"), HasSubstr("true or false")));
  Status rank = parse_error("hosts: [{name: a, gpus: 1}]\nrank_hosts: [0, zz]\n");
  EXPECT_THAT(rank.message(), AllOf(HasSubstr("line 2, column 17"), HasSubstr("rank_hosts[1]"), HasSubstr("'zz'")));
  Status index = parse_error("hosts: [{name: a, gpus: 1}]\nrank_hosts: [3]\n");
  EXPECT_THAT(index.message(), HasSubstr("host index 3 is out of range"));
  Status missing = parse_error("hosts:\n  - {gpus: 1}\n");
  EXPECT_THAT(missing.message(), AllOf(HasSubstr("line 2, column 5"), HasSubstr("hosts[0].name"), HasSubstr("missing")));
  Status shape = parse_error("hosts: {name: a}\n");
  EXPECT_THAT(shape.message(), AllOf(HasSubstr("line 1, column 8"), HasSubstr("expected a list of hosts")));
}

// What an adversarial run found: each is refused with an error naming where,
// never aborted on, and quickly.
TEST(DeploymentYaml, CountBombIsRefusedBeforeAnyHostIsMade) {
  std::string bomb = "hosts:\n";
  for (int i = 0; i < 1000; ++i) bomb += fmt::format("  - {{name: h{}, gpus: 8, count: 100000}}\n", i);
  Status s = parse_error(bomb);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("line 3, column"), HasSubstr("hosts[1].count"),
                                 HasSubstr("100000 more hosts make 200000 in all"),
                                 HasSubstr("at most 131072 hosts")));
  Status one = parse_error("hosts:\n  - {name: a, gpus: 1, count: 200000}\n");
  EXPECT_THAT(one.message(), AllOf(HasSubstr("hosts[0].count"), HasSubstr("'200000' is not a whole number in [1, 131072]")));
}

TEST(DeploymentYaml, AliasBombIsRefusedByItsExpandedSize) {
  std::string text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 8; ++i) {
    text += fmt::format("a{}: &a{} [", i, i);
    for (int j = 0; j < 10; ++j) text += fmt::format("{}*a{}", j ? ", " : "", i - 1);
    text += "]\n";
  }
  text += "hosts: *a8\n";
  ASSERT_LT(text.size(), 8000u) << "a small file";
  Status s = parse_error(text);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("more than 200000 values"), HasSubstr("alias")));
}

TEST(DeploymentYaml, DuplicateKeysAreRefusedWithBothPlaces) {
  Status top = parse_error("hosts: [{name: a, gpus: 1}]\nconfig: {cpu_offload: true}\nconfig: {cpu_offload: false}\n");
  EXPECT_THAT(top.message(), AllOf(HasSubstr("line 3, column 1"), HasSubstr("key 'config' appears twice"),
                                   HasSubstr("first at line 2")));
  Status inner = parse_error("hosts: [{name: a, gpus: 1, gpus: 2}]\n");
  EXPECT_THAT(inner.message(), AllOf(HasSubstr("line 1, column 28"), HasSubstr("key 'gpus' appears twice")));
}

TEST(DeploymentYaml, ASecondDocumentIsRefused) {
  Status s = parse_error("hosts: [{name: a, gpus: 1}]\n---\nhosts: [{name: b, gpus: 1}]\n");
  EXPECT_THAT(s.message(), AllOf(HasSubstr("line 3"), HasSubstr("a second YAML document")));
}

TEST(DeploymentYaml, BooleansAreExactlyTrueOrFalse) {
  for (const char* word : {"yes", "no", "on", "off", "True", "FALSE", "1", "y"}) {
    Status s = parse_error(fmt::format("hosts: [{{name: a, gpus: 1}}]\nconfig: {{cpu_offload: {}}}\n", word));
    EXPECT_THAT(s.message(), AllOf(HasSubstr("config.cpu_offload"), HasSubstr(fmt::format("'{}' is not a boolean", word)),
                                   HasSubstr("write true or false")));
  }
  Status layout = parse_error("hosts: [{name: a, gpus: 1}]\nlayout: {elastic_ep: on}\n");
  EXPECT_THAT(layout.message(), HasSubstr("layout.elastic_ep"));
}

TEST(DeploymentYaml, QuotedRankHostsAreNamesPlainNumbersAreIndices) {
  auto named = parse_deployment_text(
      "hosts: [{name: '1', gpus: 1}, {name: '0', gpus: 1}]\nrank_hosts: ['0', '1']\nlayout: {dp: 2}\n", "d.yaml");
  ASSERT_TRUE(named.is_ok()) << named.status().to_string();
  EXPECT_EQ(named->rank_hosts, (std::vector<int>{1, 0}));
  auto indexed = parse_deployment_text(
      "hosts: [{name: '1', gpus: 1}, {name: '0', gpus: 1}]\nrank_hosts: [0, 1]\nlayout: {dp: 2}\n", "d.yaml");
  ASSERT_TRUE(indexed.is_ok()) << indexed.status().to_string();
  EXPECT_EQ(indexed->rank_hosts, (std::vector<int>{0, 1}));
  Status unknown = parse_error("hosts: [{name: a, gpus: 1}]\nrank_hosts: ['0']\n");
  EXPECT_THAT(unknown.message(), HasSubstr("'0' names no hosts"));
}

TEST(DeploymentYaml, DeepNestingIsRefusedAsTooDeep) {
  for (int depth : {100, 500, 5000}) {
    Status s = parse_error("hosts: " + std::string(static_cast<size_t>(depth), '[') +
                           std::string(static_cast<size_t>(depth), ']') + "\n");
    EXPECT_THAT(s.message(), HasSubstr("nested deeper than 64 levels")) << depth;
  }
}

TEST(DeploymentYaml, LongValuesAreEchoedAsExcerpts) {
  const std::string huge(200000, 'x');
  for (const std::string& text : {"hosts: [{name: a, gpus: " + huge + "}]\n",
                                   "hosts: [{name: a, gpus: 1}]\n? " + huge + "\n: 1\n",  // an explicit key: any length
                                   "hosts: [{name: a, gpus: 1, shm_size: " + huge + "}]\n",
                                   "hosts: [{name: " + huge + ", gpus: 1}]\n",
                                   "hosts: [{name: a, gpus: 1}]\nconfig: {shard_group: " + huge + "}\n"}) {
    Status s = parse_error(text);
    EXPECT_LT(s.message().size(), 1024u) << s.message().substr(0, 300);
    EXPECT_THAT(s.message(), HasSubstr("(200000 bytes)"));
  }
  Status raw = parse_error("hosts: [{name: a, gpus: \"\\xff\\x01\"}]\n");
  EXPECT_THAT(raw.message(), HasSubstr("\\x01")) << "a control character is shown, not sent to the terminal";
}

TEST(DeploymentYaml, SizesAboveOneExbibyteAreRefused) {
  Status s = parse_error("hosts: [{name: a, gpus: 1, gpu_memory: 16000000TiB}]\n");
  EXPECT_THAT(s.message(), AllOf(HasSubstr("hosts[0].gpu_memory"), HasSubstr(golden_message("size.over_1_eib"))));
}

TEST(DeploymentYaml, FilesThatAreNotRegularAreRefusedAtOnce) {
  char templ[] = "/tmp/engramlab-yamlfifo-XXXXXX";
  const std::string dir = ::mkdtemp(templ);
  const std::string fifo = dir + "/deploy.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  auto from_fifo = load_deployment_file(fifo);
  auto from_zero = load_deployment_file("/dev/zero");
  auto from_dir = load_deployment_file(dir);
  // A FIFO without a writer would block forever: any bound tells.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_THAT(from_fifo.status().message(), AllOf(HasSubstr(fifo), HasSubstr("is a FIFO, not a regular file")));
  EXPECT_THAT(from_zero.status().message(), HasSubstr("is a device file, not a regular file"));
  EXPECT_THAT(from_dir.status().message(), HasSubstr("is a directory"));
  const std::string big = dir + "/big.yaml";
  {
    std::FILE* f = std::fopen(big.c_str(), "w");
    const std::string line(1023, '#');
    for (int i = 0; i < 1100; ++i) std::fprintf(f, "%s\n", line.c_str());
    std::fclose(f);
  }
  EXPECT_THAT(load_deployment_file(big).status().message(), HasSubstr("larger than 1048576 bytes"));
  std::filesystem::remove_all(dir);
}

TEST(DeploymentYaml, SyntaxErrorsHaveLineAndColumn) {
  Status s = parse_error("hosts: [{name: a, gpus: 1}\nlayout: {tp: 1}\n");
  EXPECT_THAT(s.message(), AllOf(HasSubstr("d.yaml: line"), HasSubstr("column"), HasSubstr("not valid YAML")));
}

TEST(DeploymentYaml, EmbeddedSectionsCanBeIgnored) {
  YAML::Node node = YAML::Load("hosts: [{name: a, gpus: 2}]\nfaults: {}\nexpect: {placement: host_shared}\n");
  EXPECT_FALSE(parse_deployment(node, "s.yaml").is_ok());
  std::vector<std::string> extra = {"faults", "expect"};
  auto r = parse_deployment(node, "s.yaml", extra);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->hosts[0].gpu_count, 2);
}

TEST(DeploymentYaml, ExampleFilesParseAndPlan) {
  const std::filesystem::path dir = std::filesystem::path(ENGRAM_SOURCE_DIR) / "scenarios" / "deployments";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    auto d = load_deployment_file(entry.path().string());
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    WarningSink sink;
    auto plan = plan_deployment(d.value(), sink);
    // Files named strict_* show a strict-validation failure; the rest plan.
    const bool strict = entry.path().filename().string().rfind("strict_", 0) == 0;
    EXPECT_EQ(plan.is_ok(), !strict) << entry.path() << ": " << plan.status().to_string();
  }
  EXPECT_GE(files, 5);
}

TEST(DeploymentYaml, MissingFileNamesThePath) {
  auto r = load_deployment_file("/nonexistent/deploy.yaml");
  ASSERT_FALSE(r.is_ok());
  EXPECT_THAT(r.status().message(), HasSubstr("/nonexistent/deploy.yaml"));
}

}  // namespace
}  // namespace engram
