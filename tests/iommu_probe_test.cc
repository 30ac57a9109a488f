// The IOMMU facts `doctor` reports, read from a sysfs-shaped directory: no
// directory, no groups, identity groups only, and translated (DMA, DMA-FQ)
// groups among others.
#include "backends/ipc/iommu_probe.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace engram::ipc {
namespace {

class IommuGroups : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("engramlab-iommu-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void group(const std::string& name, const std::string& type) {
    std::filesystem::create_directories(dir_ / name);
    std::ofstream(dir_ / name / "type") << type << "\n";
  }
  std::filesystem::path dir_;
};

TEST_F(IommuGroups, AnAbsentDirectoryIsNoIommu) {
  const IommuFacts f = read_iommu_facts((dir_ / "absent").string());
  EXPECT_FALSE(f.readable);
  EXPECT_EQ(f.group_count, 0);
  EXPECT_FALSE(f.translated);
  EXPECT_THAT(iommu_text(f), ::testing::StartsWith("none"));
}

TEST_F(IommuGroups, IdentityGroupsPassThrough) {
  group("0", "identity");
  group("1", "identity");
  std::filesystem::create_directories(dir_ / "2");  // a group without a readable type is not counted
  const IommuFacts f = read_iommu_facts(dir_.string());
  EXPECT_TRUE(f.readable);
  EXPECT_EQ(f.group_count, 2);
  EXPECT_FALSE(f.translated);
  EXPECT_EQ(f.types.at("identity"), 2);
  EXPECT_EQ(iommu_text(f), "not translated (2 groups: identity x2)");
}

TEST_F(IommuGroups, OneDmaGroupMakesItTranslated) {
  group("0", "identity");
  group("7", "DMA-FQ");
  group("9", "DMA");
  const IommuFacts f = read_iommu_facts(dir_.string());
  EXPECT_EQ(f.group_count, 3);
  EXPECT_TRUE(f.translated);
  EXPECT_THAT(iommu_text(f), ::testing::StartsWith("translated (3 groups: DMA x1, DMA-FQ x1, identity x1)"));
}

// A VM's default domain: every group DMA-FQ (lazy invalidation), still translated.
TEST_F(IommuGroups, DmaFqAloneIsTranslated) {
  group("3", "DMA-FQ");
  const IommuFacts f = read_iommu_facts(dir_.string());
  EXPECT_TRUE(f.translated);
  EXPECT_EQ(f.types.at("DMA-FQ"), 1);
}

}  // namespace
}  // namespace engram::ipc
