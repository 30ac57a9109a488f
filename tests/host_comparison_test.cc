// The bridge's core (core/deployment/observed_host.h, host_comparison.h,
// deployment_as_written.h): a real host's facts against what a deployment
// file's entry states (only what it states, with the stated tolerances), the
// host found by name, by rank or through --host-map, the entry doctor
// writes for a host parsing back with our own parser to the same facts, and
// CUDA's device names as our GPU models.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/base/units.h"
#include "core/deployment_file/deployment_as_written.h"
#include "core/deployment_file/host_comparison.h"
#include "core/deployment/observed_host.h"
#include "core/model/gpu_models.h"

namespace engram {
namespace {

// One H200 host as a lone doctor sees it: 139.80 GiB GPUs, /dev/shm 64 MiB.
ObservedHost h200_host(const std::string& name = "h200-0", int gpus = 8) {
  ObservedHost h;
  h.hostname = name;
  h.boot_id = "boot-" + name;
  h.environment = RuntimeEnvironment::kBareMetal;
  h.shm_mounted = true;
  h.shm_total_bytes = 64 * kMiB;
  h.host_memory_bytes = 2 * 1024 * kGiB - 3 * kGiB;  // 2 TiB less what the kernel keeps
  h.cuda_built = true;
  h.gpu_count = gpus;
  for (int g = 0; g < gpus; ++g) {
    ObservedGpu gpu;
    gpu.ordinal = g;
    gpu.device_name = "NVIDIA H200";
    gpu.bus_id = "0000:" + std::to_string(10 + g) + ":00.0";
    gpu.memory_bytes_total = 143'155 * kMiB;
    gpu.vmm = true;
    gpu.posix_fd = true;
    gpu.fabric_attribute = true;
    gpu.nvlink_domain_reason = "no fabric";
    h.gpus.push_back(gpu);
  }
  return h;
}

DeploymentAsWritten parse(const std::string& text) {
  auto d = parse_deployment_as_written(text, "test.yaml");
  EXPECT_TRUE(d.is_ok()) << d.status().to_string() << "\n" << text;
  return d.is_ok() ? std::move(d).value() : DeploymentAsWritten{};
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

TEST(GpuModelOfDeviceName, CudaNamesAreOurModels) {
  EXPECT_EQ(gpu_model_of_device_name("NVIDIA H200"), "H200");
  EXPECT_EQ(gpu_model_of_device_name("NVIDIA H100 80GB HBM3"), "H100");
  EXPECT_EQ(gpu_model_of_device_name("NVIDIA H100 PCIe"), "H100");
  EXPECT_EQ(gpu_model_of_device_name("NVIDIA GB200"), "GB200");
  EXPECT_EQ(gpu_model_of_device_name("NVIDIA B300 SXM6 AC"), "B300");
  EXPECT_EQ(gpu_model_of_device_name("nvidia h20"), "H20");
  EXPECT_EQ(gpu_model_of_device_name("NVIDIA L40S"), "L40S");  // no model of ours: the name as CUDA gives it
  EXPECT_FALSE(is_builtin_gpu_model("L40S"));
  EXPECT_TRUE(is_builtin_gpu_model("gb300"));
}

TEST(HostDifferences, NamesTheFieldTheFilesValueAndTheRealOne) {
  const DeploymentAsWritten file =
      parse("hosts: [{name: h200-0, gpus: 8, gpu_model: H100, shm_size: 190GiB, imex_channel: true}]\n");
  const FactsComparison c = host_differences(file.host(0), h200_host());
  ASSERT_EQ(c.differences.size(), 3u) << joined(c.differences);
  EXPECT_EQ(c.differences[0], "hosts[0] 'h200-0' gpu_model: the file says H100, this host has H200 (NVIDIA H200)");
  EXPECT_EQ(c.differences[1], "hosts[0] 'h200-0' shm_size: the file says 190.0 GiB, /dev/shm here is 64 MiB");
  EXPECT_EQ(c.differences[2], "hosts[0] 'h200-0' imex_channel: the file says true, this host has no IMEX channel");
  EXPECT_TRUE(c.not_checked.empty()) << joined(c.not_checked);
}

TEST(HostDifferences, AFieldLeftOutIsNoDifference) {
  // The parser's defaults (gpu_model H200, shm_size 64 MiB, posix_fd true)
  // would all differ from this host; the file states none of them.
  const DeploymentAsWritten file = parse("hosts: [{name: h200-0, gpus: 8}]\n");
  ObservedHost real = h200_host();
  for (ObservedGpu& g : real.gpus) {
    g.device_name = "NVIDIA H100 80GB HBM3";
    g.posix_fd = false;
  }
  real.shm_total_bytes = 190 * kGiB;
  real.imex_channels = {"channel0"};
  real.host_memory_bytes = 100 * kGiB;
  real.memory_limit_bytes = kGiB;
  const FactsComparison c = host_differences(file.host(0), real);
  EXPECT_TRUE(c.differences.empty()) << joined(c.differences);
}

TEST(HostDifferences, EveryStatedFieldIsCompared) {
  const DeploymentAsWritten file = parse(
      "hosts: [{name: h200-0, gpus: 4, gpu_memory: 79.15GiB, host_memory: 1TiB, nvlink_domain: nvl72-a,\n"
      "         fabric_attribute: false, posix_fd_attribute: true, environment: kubernetes,\n"
      "         memory_limit_per_rank: 16GiB, shm_size: none}]\n");
  ObservedHost real = h200_host();
  real.gpus[3].posix_fd = false;
  const FactsComparison c = host_differences(file.host(0), real);
  const std::string all = joined(c.differences);
  EXPECT_EQ(c.differences.size(), 9u) << all;
  EXPECT_NE(all.find("gpus: the file says 4, this process sees 8 GPUs"), std::string::npos) << all;
  EXPECT_NE(all.find("gpu_memory: the file says 79.2 GiB, GPU 0 here has 139.8 GiB (CUDA's total)"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("host_memory: the file says 1024.0 GiB, this host has 2045.0 GiB (MemTotal)"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("nvlink_domain: the file says nvl72-a, GPU 0 here is in no NVLink domain (no fabric)"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("fabric_attribute: the file says false, GPU 0 here reports FABRIC handle support"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("posix_fd_attribute: the file says true, GPU 3 here reports no POSIX fd handle support"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("environment: the file says kubernetes, this process runs in bare_metal"), std::string::npos)
      << all;
  EXPECT_NE(all.find("memory_limit_per_rank: the file says 16.0 GiB, no memory cgroup limits this process"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("shm_size: the file says none, /dev/shm here is a 64 MiB tmpfs"), std::string::npos) << all;
}

TEST(HostDifferences, FiguresWithinTheirToleranceAgree) {
  // df -h rounds 94.4 GiB up to 95G (0.6%); plan prints 139.80 GiB; a DGX's
  // MemTotal is a few GiB below its 2 TiB; a cgroup limit is page-rounded.
  const DeploymentAsWritten file =
      parse("hosts: [{name: h200-0, gpus: 8, shm_size: 95G, gpu_memory: 139.80GiB, host_memory: 2TiB,\n"
            "         memory_limit_per_rank: 16GiB}]\n");
  ObservedHost real = h200_host();
  real.shm_total_bytes = static_cast<uint64_t>(94.4 * static_cast<double>(kGiB));
  real.memory_limit_bytes = 16 * kGiB - 4096;
  real.memory_limit_cgroup = "/sys/fs/cgroup/job";
  EXPECT_TRUE(host_differences(file.host(0), real).differences.empty())
      << joined(host_differences(file.host(0), real).differences);
  // Past them, each differs.
  real.shm_total_bytes = 93 * kGiB;                  // 2% under 95G
  real.memory_limit_bytes = 16 * kGiB - 2 * 4096;    // two pages
  real.gpus[0].memory_bytes_total = 137 * kGiB;      // 2% under
  real.host_memory_bytes = 1900 * kGiB;              // 7.8% under
  EXPECT_EQ(host_differences(file.host(0), real).differences.size(), 4u)
      << joined(host_differences(file.host(0), real).differences);
}

TEST(HostDifferences, WhatCannotBeSeenHereIsSaidNotPassed) {
  const DeploymentAsWritten file =
      parse("hosts: [{name: h, gpus: 8, gpu_model: H100, fabric_attribute: true, shm_size_limit: 10Gi}]\n");
  ObservedHost real = h200_host("h", 0);
  real.gpus.clear();
  real.no_gpu_reason = "no CUDA driver";
  const FactsComparison c = host_differences(file.host(0), real);
  EXPECT_TRUE(c.differences.empty()) << joined(c.differences);
  ASSERT_EQ(c.not_checked.size(), 2u) << joined(c.not_checked);
  EXPECT_EQ(c.not_checked[0],
            "hosts[0] 'h' gpus, gpu_model, fabric_attribute: not checked: no GPU is visible here (no CUDA driver)");
  EXPECT_NE(c.not_checked[1].find("shm_size_limit: not checked"), std::string::npos);
}

// A container's memory_limit was never compared, yet doctor --file said the
// host matched "every fact it states": it is named as not checked.
TEST(HostDifferences, AContainerMemoryLimitIsSaidNotChecked) {
  const DeploymentAsWritten file = parse("hosts: [{name: h, gpus: 8, memory_limit: 64GiB}]\n");
  ObservedHost real = h200_host("h", 8);
  FactsComparison c = host_differences(file.host(0), real);
  EXPECT_TRUE(c.differences.empty()) << joined(c.differences);
  ASSERT_EQ(c.not_checked.size(), 1u) << joined(c.not_checked);
  EXPECT_EQ(c.not_checked[0],
            "hosts[0] 'h' memory_limit: not checked: a container's limit over its ranks; no memory cgroup limits "
            "this process");
  real.memory_limit_bytes = 16 * kGiB;
  real.memory_limit_cgroup = "/sys/fs/cgroup/job";
  c = host_differences(file.host(0), real);
  ASSERT_EQ(c.not_checked.size(), 1u) << joined(c.not_checked);
  EXPECT_NE(c.not_checked[0].find("this process's memory cgroup /sys/fs/cgroup/job limits it to 16.0 GiB"),
            std::string::npos)
      << c.not_checked[0];
}

TEST(HostDifferences, ARankInAContainerOfItsOwnSeesTheGpusTheFileLetsItSee) {
  const DeploymentAsWritten file = parse("hosts: [{name: h, gpus: 8, visible_gpus_per_rank: 1}]\n");
  ObservedHost real = h200_host("h", 1);
  EXPECT_TRUE(host_differences(file.host(0), real).differences.empty());
  real = h200_host("h", 8);
  const FactsComparison c = host_differences(file.host(0), real);
  ASSERT_EQ(c.differences.size(), 1u);
  EXPECT_EQ(c.differences[0],
            "hosts[0] 'h' visible_gpus_per_rank: the file says 1, this process sees 8 GPUs (CUDA_VISIBLE_DEVICES "
            "applies)");
}

TEST(HostEntryYaml, ParsesBackToTheFactsItWasWrittenFrom) {
  ObservedHost real = h200_host("gb-7", 4);
  for (ObservedGpu& g : real.gpus) {
    g.device_name = "NVIDIA GB200";
    g.memory_bytes_total = 188'733 * kMiB + 12345;  // not a whole MiB: written exactly
    g.nvlink_domain = "b7e0c9a1-clique-3";
  }
  real.imex_channels = {"channel0"};
  real.shm_total_bytes = 190 * kGiB;
  real.host_memory_bytes = 960'000'000'000ull / 1024 * 1024;
  real.environment = RuntimeEnvironment::kKubernetes;
  real.memory_limit_bytes = 64 * kGiB;
  real.memory_limit_cgroup = "/sys/fs/cgroup/pod";
  const std::string entry = host_entry_yaml(single_host(real));
  const DeploymentAsWritten file = parse("hosts:\n" + entry + "\n");
  ASSERT_EQ(file.deployment.hosts.size(), 1u);
  const HostSpec& h = file.deployment.hosts[0];
  EXPECT_EQ(h.name, "gb-7");
  EXPECT_EQ(h.gpu_count, 4);
  EXPECT_EQ(h.gpu_model, "GB200");
  EXPECT_EQ(h.gpu_memory_bytes, 188'733 * kMiB + 12345);
  EXPECT_EQ(h.host_memory_bytes, *real.host_memory_bytes);
  EXPECT_EQ(h.tmpfs_bytes_total, 190 * kGiB);
  EXPECT_TRUE(h.shm_mounted);
  EXPECT_EQ(h.nvlink_domain, "b7e0c9a1-clique-3");
  EXPECT_TRUE(h.imex_channel);
  EXPECT_TRUE(h.fabric_attribute);
  EXPECT_TRUE(h.posix_fd_attribute);
  EXPECT_EQ(h.environment, RuntimeEnvironment::kKubernetes);
  // The cgroup is said, not written: it may hold one rank or a container's.
  EXPECT_FALSE(h.memory_limit_bytes_per_rank.has_value());
  EXPECT_NE(entry.find("memory_limit_per_rank: 64GiB"), std::string::npos) << entry;
  // Every field it wrote is stated, and the host matches its own entry.
  for (const char* field : {"gpus", "gpu_model", "gpu_memory", "host_memory", "shm_size", "nvlink_domain",
                            "imex_channel", "fabric_attribute", "posix_fd_attribute", "environment"})
    EXPECT_TRUE(file.host(0).states(field)) << field << "\n" << entry;
  const FactsComparison c = host_differences(file.host(0), real);
  EXPECT_TRUE(c.differences.empty()) << joined(c.differences) << entry;
  EXPECT_TRUE(c.not_checked.empty()) << joined(c.not_checked) << entry;
}

TEST(HostEntryYaml, WithoutAGpuItCountsTheHostsRanksAndSaysSo) {
  ObservedHost real = h200_host("vm", 0);
  real.gpus.clear();
  real.shm_mounted = false;
  real.shm_not_tmpfs = "/dev/shm is a directory on ext4";
  real.no_gpu_reason = "no CUDA driver";
  ClusterHost host = single_host(real);
  host.ranks = {0, 1, 2};
  const std::string entry = host_entry_yaml(host);
  EXPECT_NE(entry.find("no GPU could be read here (no CUDA driver): gpus counts this host's 3 ranks"),
            std::string::npos)
      << entry;
  const DeploymentAsWritten file = parse("hosts:\n" + entry + "\n");
  EXPECT_EQ(file.deployment.hosts[0].gpu_count, 3);
  EXPECT_FALSE(file.deployment.hosts[0].shm_mounted);
  EXPECT_FALSE(file.host(0).states("gpu_model"));
  EXPECT_FALSE(file.host(0).states("gpu_memory"));
  EXPECT_TRUE(host_differences(file.host(0), real).differences.empty());
}

TEST(HostEntryYaml, AGpuWeHaveNoModelOfIsNamedInAComment) {
  ObservedHost real = h200_host("l40", 2);
  for (ObservedGpu& g : real.gpus) g.device_name = "NVIDIA L40S";
  const std::string entry = host_entry_yaml(single_host(real));
  EXPECT_NE(entry.find("'NVIDIA L40S' is no GPU model engramlab has"), std::string::npos) << entry;
  const DeploymentAsWritten file = parse("hosts:\n" + entry + "\n");
  EXPECT_FALSE(file.host(0).states("gpu_model"));
  EXPECT_EQ(file.deployment.hosts[0].gpu_memory_bytes, 143'155 * kMiB);
}

TEST(ClusterHosts, OneEntryPerHostWithItsGpusAndItsRanks) {
  // Two hosts, two ranks each; on h2 every rank sees one GPU of its own.
  std::vector<ObservedHost> by_rank = {h200_host("h1", 8), h200_host("h1", 8), h200_host("h2", 1), h200_host("h2", 1)};
  by_rank[3].gpus[0].bus_id = "0000:99:00.0";
  const std::vector<ClusterHost> hosts = cluster_hosts(by_rank);
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(hosts[0].gpu_count, 8);
  EXPECT_FALSE(hosts[0].one_gpu_per_rank);
  EXPECT_EQ(hosts[1].ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(hosts[1].gpu_count, 2);
  EXPECT_TRUE(hosts[1].one_gpu_per_rank);
  const std::string yaml = cluster_hosts_yaml(hosts);
  const DeploymentAsWritten file = parse(yaml + "layout: {tp: 1, dp: 10}\n");
  ASSERT_EQ(file.deployment.hosts.size(), 2u) << yaml;
  EXPECT_EQ(file.deployment.hosts[0].name, "h1");
  EXPECT_EQ(file.deployment.hosts[1].name, "h2");
  EXPECT_EQ(file.deployment.hosts[1].visible_gpus_per_rank, 1);
  EXPECT_TRUE(host_differences(file.host(1), by_rank[2]).differences.empty());
}

TEST(ObservedHostJson, RoundTrips) {
  ObservedHost real = h200_host("h", 2);
  real.gpus[1].error = "cannot open: CUDA_ERROR_OUT_OF_MEMORY";
  real.memory_limit_bytes = 5 * kGiB;
  real.p2p_lines = {"GPU 0 -> GPU 1: yes"};
  auto back = observed_host_from_json(observed_host_json(real));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(observed_host_json(*back), observed_host_json(real));
  Json broken = observed_host_json(real);
  broken["gpus"][0]["memory_bytes_total"] = "lots";
  auto refused = observed_host_from_json(broken);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().message(), "host facts: gpus[0].memory_bytes_total: expected a whole number");
}

TEST(MatchHost, ByRankByNameAndThroughTheHostMap) {
  const DeploymentAsWritten file = parse(
      "hosts: [{name: a, gpus: 2}, {name: b, gpus: 2}]\nlayout: {tp: 1, dp: 4}\n");
  const std::vector<int> rank_hosts = {0, 0, 1, 1};
  const HostMap none;
  auto on_b = match_host(file, rank_hosts, none, 2, h200_host("b"));
  ASSERT_TRUE(on_b.is_ok());
  EXPECT_EQ(on_b->host_index, 1);
  EXPECT_TRUE(on_b->differences.empty());
  // Rank 0 belongs on a, but runs on b.
  auto misplaced = match_host(file, rank_hosts, none, 0, h200_host("b"));
  ASSERT_TRUE(misplaced.is_ok());
  EXPECT_EQ(misplaced->host_index, 1);
  ASSERT_EQ(misplaced->differences.size(), 1u);
  EXPECT_EQ(misplaced->differences[0], "rank_hosts: the file places rank 0 on hosts[0] 'a', it runs on 'b'");
  // By name, for a process of no job.
  auto by_name = match_host(file, {}, none, -1, h200_host("b"));
  ASSERT_TRUE(by_name.is_ok());
  EXPECT_EQ(by_name->host_index, 1);
  // An unknown host names itself, the file's hosts and the fix.
  auto unknown = match_host(file, rank_hosts, none, 1, h200_host("node17"));
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_EQ(unknown.status().message(),
            "this host 'node17' is not in test.yaml (its hosts: a, b); where the cluster's hostnames differ from "
            "the file's, map them: --host-map node17=a[,REAL=FILE...]");
  auto map = parse_host_map("node17=a,node18=b");
  ASSERT_TRUE(map.is_ok());
  auto mapped = match_host(file, rank_hosts, *map, 1, h200_host("node17"));
  ASSERT_TRUE(mapped.is_ok());
  EXPECT_EQ(mapped->host_index, 0);
  EXPECT_TRUE(mapped->differences.empty());
}

TEST(ParseHostMap, RefusesWhatIsNotRealEqualsFile) {
  for (const char* bad : {"a", "=b", "a=", "a=b=c", "a=b,,c=d", "a=b,a=c"}) {
    auto map = parse_host_map(bad);
    ASSERT_FALSE(map.is_ok()) << bad;
    EXPECT_EQ(map.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(map.status().message().rfind("--host-map: ", 0), 0u) << map.status().message();
  }
  EXPECT_EQ(parse_host_map("")->real_to_file.size(), 0u);
}

TEST(NvlinkDomains, TheFilesLabelsAreComparedByHowTheyGroupTheHosts) {
  const DeploymentAsWritten file = parse(
      "hosts: [{name: a, gpus: 1, nvlink_domain: rack1}, {name: b, gpus: 1, nvlink_domain: rack1},\n"
      "        {name: c, gpus: 1, nvlink_domain: rack2}]\nlayout: {tp: 1, dp: 3}\n");
  std::vector<ObservedHost> by_rank = {h200_host("a", 1), h200_host("b", 1), h200_host("c", 1)};
  by_rank[0].gpus[0].nvlink_domain = "uuid-1";
  by_rank[1].gpus[0].nvlink_domain = "uuid-1";
  by_rank[2].gpus[0].nvlink_domain = "uuid-2";
  const std::vector<int> index = {0, 1, 2};
  EXPECT_TRUE(nvlink_domain_differences(file, index, by_rank).empty());
  by_rank[1].gpus[0].nvlink_domain = "uuid-2";  // b is in c's domain
  const std::vector<std::string> d = nvlink_domain_differences(file, index, by_rank);
  ASSERT_EQ(d.size(), 2u) << joined(d);
  EXPECT_EQ(d[0], "hosts[0] 'a' and hosts[1] 'b' nvlink_domain: the file puts both in rack1, here they are in uuid-1 "
                  "and uuid-2");
  EXPECT_EQ(d[1], "hosts[1] 'b' and hosts[2] 'c' nvlink_domain: the file puts them in rack1 and rack2, here both "
                  "are in uuid-2");
}

TEST(DeploymentAsWritten, ACountedEntryStatesItsFieldsForEveryCopy) {
  const DeploymentAsWritten file =
      parse("hosts: [{name: n, count: 3, gpus: 4, shm_size: 1GiB}, {name: m, gpus: 1}]\n");
  ASSERT_EQ(file.host_fields.size(), 4u);
  EXPECT_TRUE(file.host(2).states("shm_size"));
  EXPECT_EQ(file.host(2).spec.name, "n-2");
  EXPECT_FALSE(file.host(3).states("shm_size"));
}

}  // namespace
}  // namespace engram
