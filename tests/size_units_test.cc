// Sizes as users write them: binary Ki/Mi/Gi/Ti/Pi and KiB..PiB, decimal
// KB..PB, and the single letters K/M/G/T/P read as the context that wrote
// them reads them (Docker and tmpfs: powers of 1024; Kubernetes quantities:
// powers of 1000). Every fix the tool prints parses back, in its own
// context, to at least the size it asks for.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>

#include "core/base/units.h"
#include "core/plan/shm_fix.h"
#include "tests/golden_messages.h"

namespace engram {
namespace {

using ::engram::testing::golden_message;

using ::testing::HasSubstr;

uint64_t bytes_of(std::string_view text, SizeUnits units = SizeUnits::kBinaryLetters) {
  auto bytes = parse_bytes(text, "size", units);
  EXPECT_TRUE(bytes.is_ok()) << text << ": " << bytes.status().to_string();
  return bytes.is_ok() ? *bytes : 0;
}

TEST(SizeUnits, BinaryAndDecimalSpellingsInAnyCase) {
  EXPECT_EQ(bytes_of("189Gi"), 189 * kGiB);
  EXPECT_EQ(bytes_of("189gi"), 189 * kGiB);
  EXPECT_EQ(bytes_of("189GiB"), 189 * kGiB);
  EXPECT_EQ(bytes_of("64Mi"), 64 * kMiB);
  EXPECT_EQ(bytes_of("3Ki"), 3 * kKiB);
  EXPECT_EQ(bytes_of("2Ti"), 2 * 1024 * kGiB);
  EXPECT_EQ(bytes_of("1Pi"), uint64_t{1} << 50);
  EXPECT_EQ(bytes_of("1PiB"), uint64_t{1} << 50);
  EXPECT_EQ(bytes_of("189GB"), 189'000'000'000u);
  EXPECT_EQ(bytes_of("5kB"), 5000u);
  EXPECT_EQ(bytes_of("2PB"), 2'000'000'000'000'000u);
  EXPECT_EQ(bytes_of("12B"), 12u);
  EXPECT_EQ(bytes_of("1.5Gi"), 3 * kGiB / 2);
}

TEST(SizeUnits, SingleLettersReadAsTheirContextReadsThem) {
  // Docker's --shm-size=189g and a tmpfs mount's size=189G: GiB.
  EXPECT_EQ(bytes_of("189g"), 189 * kGiB);
  EXPECT_EQ(bytes_of("189G"), 189 * kGiB);
  EXPECT_EQ(bytes_of("64M"), 64 * kMiB);
  // Kubernetes: G is 10^9 and Gi is 2^30.
  EXPECT_EQ(bytes_of("189G", SizeUnits::kKubernetes), 189'000'000'000u);
  EXPECT_EQ(bytes_of("189Gi", SizeUnits::kKubernetes), 189 * kGiB);
  EXPECT_EQ(bytes_of("500M", SizeUnits::kKubernetes), 500'000'000u);
  EXPECT_EQ(bytes_of("2T", SizeUnits::kKubernetes), 2'000'000'000'000u);
}

TEST(SizeUnits, BadSizesNameTheFieldTheValueAndTheWaysToWriteIt) {
  const Status unknown = parse_bytes("189Gx", "hosts[0].shm_size").status();
  EXPECT_EQ(unknown.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(unknown.message(), HasSubstr("hosts[0].shm_size: '189Gx' is not a size (unknown unit 'gx')"));
  EXPECT_THAT(unknown.message(), HasSubstr("190Gi"));
  for (const auto& [text, key] : {std::pair{"189", "size.no_unit"}, std::pair{"2Ei", "size.unknown_unit"},  // past 1 EiB anyway
                                  std::pair{"2048Pi", "size.over_1_eib"}}) {
    const Status s = parse_bytes(text, "--shm-size").status();
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << text;
    EXPECT_THAT(s.message(), HasSubstr("--shm-size")) << text;
    EXPECT_THAT(s.message(), HasSubstr(golden_message(key))) << text;
  }
  EXPECT_THAT(parse_bytes("-1Gi", "x").status().message(), HasSubstr("cannot be negative"));
  EXPECT_THAT(std::string(kSizeUnitsHelp), HasSubstr("Gi is 2^30"));
}

// Every size in every fix text, read as the tool it is written for reads
// it, holds the tables it asks room for.
TEST(SizeUnits, EveryFixTheToolPrintsParsesBackToAtLeastWhatItAsks) {
  const std::regex docker(R"(--shm-size=([0-9.]+[a-zA-Z]+))"), kubernetes(R"(sizeLimit: ([0-9.]+[a-zA-Z]+))"),
      tmpfs(R"(size=([0-9.]+[a-zA-Z]+) /dev/shm)");
  for (const uint64_t table_bytes : {uint64_t{202'758'032'400}, uint64_t{101'377'628'352}, 64 * kMiB + 1,
                                     uint64_t{10'187'264}, 1 * kGiB}) {
    const std::string fix = shm_fix_text(table_bytes, RuntimeEnvironment::kUnknown);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(fix, m, docker)) << fix;
    EXPECT_GE(bytes_of(m[1].str()), table_bytes) << fix;
    ASSERT_TRUE(std::regex_search(fix, m, kubernetes)) << fix;
    EXPECT_GE(bytes_of(m[1].str(), SizeUnits::kKubernetes), table_bytes) << fix;
    ASSERT_TRUE(std::regex_search(fix, m, tmpfs)) << fix;
    EXPECT_GE(bytes_of(m[1].str()), table_bytes) << fix;
  }
}

}  // namespace
}  // namespace engram
