// IMEX channel detection against a temp dir standing in for
// /dev/nvidia-caps-imex-channels, and the /proc host probe that reports it.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "backends/ipc/imex_channels.h"
#include "backends/ipc/proc_host_probe.h"

namespace engram::ipc {
namespace {

namespace fs = std::filesystem;

class ImexChannelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "engramlab-imex-XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    root_ = templ;
  }
  void TearDown() override { fs::remove_all(root_); }
  void touch(const std::string& name) { std::ofstream(fs::path(root_) / name) << ""; }

  std::string root_;
};

TEST_F(ImexChannelsTest, AbsentDirectoryHasNoChannel) {
  const std::string dir = root_ + "/does-not-exist";
  EXPECT_TRUE(imex_channels(dir).empty());
  EXPECT_FALSE(has_imex_channel(dir));
  EXPECT_FALSE(ProcHostProbe(dir).facts().imex_channel);
}

TEST_F(ImexChannelsTest, EmptyDirectoryHasNoChannel) {
  EXPECT_TRUE(imex_channels(root_).empty());
  EXPECT_FALSE(has_imex_channel(root_));
  EXPECT_FALSE(ProcHostProbe(root_).facts().imex_channel);
}

TEST_F(ImexChannelsTest, OtherEntriesAreNotChannels) {
  touch("README");
  touch("imex");
  EXPECT_TRUE(imex_channels(root_).empty());
  EXPECT_FALSE(ProcHostProbe(root_).facts().imex_channel);
}

TEST_F(ImexChannelsTest, ChannelEntriesAreFoundSorted) {
  touch("channel1");
  touch("README");
  touch("channel0");
  EXPECT_EQ(imex_channels(root_), (std::vector<std::string>{"channel0", "channel1"}));
  EXPECT_TRUE(has_imex_channel(root_));
  const PlacementFacts facts = ProcHostProbe(root_).facts();
  EXPECT_TRUE(facts.imex_channel);
  // The CPU-only probe still knows no NVLink domain and no GPU.
  EXPECT_TRUE(facts.nvlink_domain.empty());
  EXPECT_EQ(facts.gpu_ordinal, -1);
  EXPECT_FALSE(facts.host.hostname.empty());
}

TEST_F(ImexChannelsTest, AFileInPlaceOfTheDirectoryHasNoChannel) {
  touch("channel0");
  EXPECT_FALSE(has_imex_channel(root_ + "/channel0"));
}

}  // namespace
}  // namespace engram::ipc
