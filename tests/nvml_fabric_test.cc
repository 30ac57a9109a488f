// The NVLink domain from NVML fabric info: the pure formatting from a
// fabric-info struct, and the run-time loader's reasons when NVML is absent
// or lacks the fabric calls (no GPU needed).
#include "backends/cuda/nvml_fabric.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>

namespace engram::cuda {
namespace {

nvml::GpuFabricInfoV2 completed_info() {
  nvml::GpuFabricInfoV2 info{};
  info.version = nvml::kGpuFabricInfoV2Version;
  for (int i = 0; i < nvml::kFabricUuidBytes; ++i) info.cluster_uuid[i] = static_cast<unsigned char>(0xa0 + i);
  info.status = nvml::kSuccess;
  info.clique_id = 32767;
  info.state = nvml::kFabricStateCompleted;
  return info;
}

TEST(NvmlFabricTest, VersionTagMatchesNvmlStructVersion) {
  // NVML_STRUCT_VERSION(GpuFabricInfo, 2): sizeof(nvmlGpuFabricInfo_v2_t) | 2 << 24.
  EXPECT_EQ(nvml::kGpuFabricInfoV2Version, 36u | (2u << 24));
}

TEST(NvmlFabricTest, CompletedFabricGivesHexUuidSlashClique) {
  const NvlinkDomain d = domain_from_fabric_info(completed_info());
  EXPECT_EQ(d.domain, "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf/32767");
  EXPECT_TRUE(d.reason.empty());
}

TEST(NvmlFabricTest, SameUuidOtherCliqueIsAnotherDomain) {
  nvml::GpuFabricInfoV2 a = completed_info();
  nvml::GpuFabricInfoV2 b = completed_info();
  b.clique_id = 1;
  EXPECT_NE(domain_from_fabric_info(a).domain, domain_from_fabric_info(b).domain);
  EXPECT_EQ(domain_from_fabric_info(b).domain, "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf/1");
}

TEST(NvmlFabricTest, LeadingZeroBytesKeepTwoDigits) {
  nvml::GpuFabricInfoV2 info = completed_info();
  std::memset(info.cluster_uuid, 0, sizeof info.cluster_uuid);
  info.cluster_uuid[15] = 0x05;
  info.clique_id = 0;
  EXPECT_EQ(domain_from_fabric_info(info).domain, "00000000000000000000000000000005/0");
}

TEST(NvmlFabricTest, NotSupportedStateGivesNoDomainWithReason) {
  nvml::GpuFabricInfoV2 info = completed_info();
  info.state = nvml::kFabricStateNotSupported;
  const NvlinkDomain d = domain_from_fabric_info(info);
  EXPECT_TRUE(d.domain.empty());
  EXPECT_NE(d.reason.find("NOT_SUPPORTED"), std::string::npos) << d.reason;
}

TEST(NvmlFabricTest, UnfinishedRegistrationNamesTheState) {
  nvml::GpuFabricInfoV2 info = completed_info();
  info.state = nvml::kFabricStateInProgress;
  const NvlinkDomain d = domain_from_fabric_info(info);
  EXPECT_TRUE(d.domain.empty());
  EXPECT_NE(d.reason.find("IN_PROGRESS"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("fabric manager"), std::string::npos) << d.reason;
}

TEST(NvmlFabricTest, CompletedWithErrorStatusGivesNoDomain) {
  nvml::GpuFabricInfoV2 info = completed_info();
  info.status = nvml::kErrorNotSupported;
  const NvlinkDomain d = domain_from_fabric_info(info);
  EXPECT_TRUE(d.domain.empty());
  EXPECT_NE(d.reason.find("NVML_ERROR_NOT_SUPPORTED"), std::string::npos) << d.reason;
}

TEST(NvmlFabricTest, AllZeroUuidIsNoDomain) {
  nvml::GpuFabricInfoV2 info = completed_info();
  std::memset(info.cluster_uuid, 0, sizeof info.cluster_uuid);
  const NvlinkDomain d = domain_from_fabric_info(info);
  EXPECT_TRUE(d.domain.empty());
  EXPECT_NE(d.reason.find("all zero"), std::string::npos) << d.reason;
}

TEST(NvmlFabricTest, ReturnNames) {
  EXPECT_EQ(nvml::return_name(nvml::kSuccess), "NVML_SUCCESS");
  EXPECT_EQ(nvml::return_name(nvml::kErrorNotSupported), "NVML_ERROR_NOT_SUPPORTED");
  EXPECT_EQ(nvml::return_name(nvml::kErrorFunctionNotFound), "NVML_ERROR_FUNCTION_NOT_FOUND");
  EXPECT_EQ(nvml::return_name(999), "NVML_ERROR_UNKNOWN");
  EXPECT_EQ(nvml::return_name(12345), "nvmlReturn_t 12345");
}

TEST(NvmlFabricTest, AbsentLibraryGivesEmptyDomainAndReason) {
  const NvlinkDomain d = nvlink_domain_for_pci_bus_id("0000:3b:00.0", "libengramlab-no-such-nvml.so.1");
  EXPECT_TRUE(d.domain.empty());
  EXPECT_NE(d.reason.find("dlopen(libengramlab-no-such-nvml.so.1) failed"), std::string::npos) << d.reason;
}

TEST(NvmlFabricTest, LibraryWithoutNvmlSymbolsNamesTheMissingOne) {
  // libm is on every Linux machine and has no NVML entry points.
  const NvlinkDomain d = nvlink_domain_for_pci_bus_id("0000:3b:00.0", "libm.so.6");
  EXPECT_TRUE(d.domain.empty());
  EXPECT_NE(d.reason.find("lacks symbol nvmlInit_v2"), std::string::npos) << d.reason;
}

TEST(NvmlFabricTest, DefaultLibraryWhereAbsentGivesReason) {
  void* present = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (present == nullptr) present = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (present != nullptr) GTEST_SKIP() << "libnvidia-ml.so.1 is installed here; this test covers its absence";
  const NvlinkDomain d = nvlink_domain_for_pci_bus_id("0000:3b:00.0");
  EXPECT_TRUE(d.domain.empty());
  EXPECT_NE(d.reason.find("dlopen(libnvidia-ml.so.1) failed"), std::string::npos) << d.reason;
}

}  // namespace
}  // namespace engram::cuda
