#include "core/deployment/deployment_yaml.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "core/plan/deployment_plan.h"
#include "core/base/units.h"

namespace engram {
namespace {

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
    fabric_attribute: yes
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
  EXPECT_THAT(unit.message(), AllOf(HasSubstr("hosts[0].gpu_memory"), HasSubstr("unknown unit")));
  Status zero = parse_error("hosts: [{name: a, gpus: 1}]\nlayout: {tp: 0}\n");
  EXPECT_THAT(zero.message(), AllOf(HasSubstr("line 2, column 14"), HasSubstr("layout.tp"), HasSubstr("at least 1")));
  Status negative_dp = parse_error("hosts: [{name: a, gpus: 1}]\nlayout: {dp: -2}\n");
  EXPECT_THAT(negative_dp.message(), HasSubstr("layout.dp: -2 is out of range"));
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
