// Status and Result keep their contracts in a release build: this file is
// compiled with NDEBUG (tests/CMakeLists.txt), as RelWithDebInfo and Release
// compile everything, so a check that assert() would drop shows up here as a
// test that does not die.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "core/base/status.h"

#ifndef NDEBUG
#error "status_contract_test must be built with NDEBUG: it proves the checks survive a release build"
#endif

namespace engram {
namespace {

Result<int> failing() { return Status(ErrorCode::kUnavailable, "peer gone", {3, 5, "import"}); }

TEST(StatusContractDeathTest, ValueOfAnErrorAbortsNamingTheError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Result<int> r = failing();
        volatile int v = r.value();
        (void)v;
      },
      "Result::value\\(\\) on an error: unavailable \\(rank 3, peer 5, step import\\): peer gone");
  EXPECT_DEATH(
      {
        const Result<std::string> r = Status(ErrorCode::kInternal, "broken");
        volatile size_t n = r->size();
        (void)n;
      },
      "Result::value\\(\\) on an error: internal: broken");
  EXPECT_DEATH(
      {
        volatile int v = *failing();
        (void)v;
      },
      "Result::value\\(\\) on an error");
}

TEST(StatusContractDeathTest, AnErrorWithoutAnErrorCodeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(Status(ErrorCode::kOk, "not an error").ignore(),
               "contract violated: .*an error Status needs an error code");
  EXPECT_DEATH(Result<int>(Status::ok()).is_ok(), "contract violated: .*must carry an error");
}

TEST(StatusContractDeathTest, TakingTheStatusOfAValueAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(Result<int>(7).take_status().ignore(),
               "contract violated: .*take_status\\(\\) on a Result that holds a value");
}

TEST(StatusContractDeathTest, EngramCheckStaysOn) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  volatile bool broken = false;
  EXPECT_DEATH(ENGRAM_CHECK(broken), "contract violated: broken at .*status_contract_test.cc");
  EXPECT_DEATH(ENGRAM_CHECK_MSG(broken, "the reason"), "contract violated: broken at .*: the reason");
}

TEST(StatusContract, TheHappyPathsStillWork) {
  Result<int> ok = 7;
  EXPECT_EQ(ok.value(), 7);
  EXPECT_EQ(*ok, 7);
  Result<int> bad = failing();
  EXPECT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kUnavailable);
  EXPECT_EQ(std::move(bad).take_status().context().peer, 5);
}

TEST(StatusContract, ContextIsAddedToErrorsOnlyAndInnerContextWins) {
  Status ok = Status::ok().with_context(3, 4, "map");
  EXPECT_TRUE(ok.is_ok());
  EXPECT_EQ(ok.context().rank, -1);
  EXPECT_TRUE(ok.context().step.empty());

  std::string step = "import";  // a view of it is taken; the status keeps its own copy
  Status error = Status(ErrorCode::kUnavailable, "gone", {-1, 9, ""}).with_context(3, 4, step);
  step = "changed";
  EXPECT_EQ(error.context().rank, 3);
  EXPECT_EQ(error.context().peer, 9);  // set inside: kept
  EXPECT_EQ(error.context().step, "import");
  EXPECT_EQ(std::move(error).with_context(5, 6, "later").context().step, "import");
}

}  // namespace
}  // namespace engram
