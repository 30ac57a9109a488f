#include "core/exchange/handle_type_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

namespace engram {
namespace {

using ::testing::HasSubstr;

// HandleFacts holds views: the strings live here for the test's length.
std::string_view kept(std::string s) {
  static std::deque<std::string> store;
  return store.emplace_back(std::move(s));
}

HandleFacts facts(const std::string& host, std::string_view domain, bool imex, bool probe) {
  return {kept(host), kept("boot-" + host), domain, imex, probe};
}

TEST(HandleFacts, ViewsThePlacementFactsItIsMadeOf) {
  PlacementFacts p;
  p.host = {"node-3", "b3"};
  p.nvlink_domain = "rack-1";
  p.imex_channel = true;
  const HandleFacts f = HandleFacts::of(p, false);
  EXPECT_EQ(f.hostname.data(), p.host.hostname.data());
  EXPECT_EQ(f.boot_id, "b3");
  EXPECT_EQ(f.nvlink_domain, "rack-1");
  EXPECT_TRUE(f.imex_channel);
  EXPECT_FALSE(f.fabric_probe_ok);
  EXPECT_FALSE(f.same_host(facts("node-3", "", false, false)));  // boot ids differ
  EXPECT_TRUE(f.same_host(HandleFacts::of(p, true)));
}

TEST(ChooseHandleType, FabricWhenEveryRankHasItInOneDomain) {
  std::vector<HandleFacts> f = {facts("a", "nvl72", true, true), facts("b", "nvl72", true, true)};
  auto t = choose_handle_type(f);
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t.value(), HandleType::kFabric);
}

TEST(ChooseHandleType, FabricPreferredEvenOnOneHost) {
  std::vector<HandleFacts> f = {facts("a", "nvl72", true, true), facts("a", "nvl72", true, true)};
  EXPECT_EQ(choose_handle_type(f).value(), HandleType::kFabric);
}

TEST(ChooseHandleType, PosixFdOnOneHostWithoutImex) {
  // The H200 case: the attribute says fabric, the probe fails (no IMEX channel).
  std::vector<HandleFacts> f = {facts("a", "", false, false), facts("a", "", false, false)};
  EXPECT_EQ(choose_handle_type(f).value(), HandleType::kPosixFd);
}

TEST(ChooseHandleType, OneHostWithoutPosixFdSupportAndNoFabricNamesTheHostAndCapability) {
  HandleFacts a = facts("a", "", false, false), b = facts("a", "", false, false);
  b.posix_fd_supported = false;
  std::vector<HandleFacts> f = {a, b};
  auto t = choose_handle_type(f);
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(t.status().message().find("POSIX fd handles are not supported on a/boot-a"), std::string::npos)
      << t.status().message();
  // FABRIC still rescues a group whose devices lack POSIX fds.
  a = facts("a", "nvl72", true, true);
  b = facts("a", "nvl72", true, true);
  b.posix_fd_supported = false;
  f = {a, b};
  EXPECT_EQ(choose_handle_type(f).value(), HandleType::kFabric);
}

TEST(ChooseHandleType, SameHostnameDifferentBootIsTwoHosts) {
  HandleFacts a = facts("a", "", false, false), b = facts("a", "", false, false);
  b.boot_id = "other";
  std::vector<HandleFacts> f = {a, b};
  EXPECT_EQ(choose_handle_type(f).status().code(), ErrorCode::kFailedPrecondition);
}

TEST(ChooseHandleType, ErrorsNameHostsDomainsAndMissingCapability) {
  std::vector<HandleFacts> no_imex = {facts("a", "d1", false, false), facts("b", "d1", true, true)};
  auto t = choose_handle_type(no_imex);
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_THAT(t.status().message(), HasSubstr("a/boot-a"));
  EXPECT_THAT(t.status().message(), HasSubstr("b/boot-b"));
  EXPECT_THAT(t.status().message(), HasSubstr("d1"));
  EXPECT_THAT(t.status().message(), HasSubstr("IMEX channel missing on a/boot-a"));

  std::vector<HandleFacts> no_fabric = {facts("a", "d1", true, false), facts("b", "d1", true, true)};
  EXPECT_THAT(choose_handle_type(no_fabric).status().message(), HasSubstr("fabric support"));

  std::vector<HandleFacts> split = {facts("a", "d1", true, true), facts("b", "d2", true, true)};
  auto s = choose_handle_type(split);
  EXPECT_THAT(s.status().message(), HasSubstr("NVLink domain: the ranks span 2 domains"));
  EXPECT_THAT(s.status().message(), HasSubstr("d2"));

  std::vector<HandleFacts> none = {facts("a", "", true, true), facts("b", "", true, true)};
  EXPECT_THAT(choose_handle_type(none).status().message(), HasSubstr("NVLink domain missing"));
}

// A plan probes nothing (issue 48): a host whose deployment entry leaves
// fabric_attribute false is "not stated", never a probe that failed; a
// machine's facts (a real probe ran) keep the probe's words.
TEST(ChooseHandleType, APlanSaysFabricIsNotStatedWhereNothingWasProbed) {
  std::vector<HandleFacts> stated = {facts("node-0", "d1", true, false), facts("node-1", "d1", true, false)};
  for (HandleFacts& f : stated) f.predicted = true;
  const std::string planned(choose_handle_type(stated).status().message());
  EXPECT_THAT(planned, HasSubstr("FABRIC handle support not stated (fabric_attribute: false) on node-0"));
  EXPECT_THAT(planned, ::testing::Not(HasSubstr("probe")));
  std::vector<HandleFacts> probed = {facts("node-0", "d1", true, false), facts("node-1", "d1", true, false)};
  EXPECT_THAT(std::string(choose_handle_type(probed).status().message()),
              HasSubstr("fabric support (FABRIC create/export probe) failing on"));
}

TEST(ChooseHandleType, EmptyInputIsInvalid) {
  EXPECT_EQ(choose_handle_type({}).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace engram
