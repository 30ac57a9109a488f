// The UE8M0 scale-byte rules (TableSpec::scale_byte_rule) on every CPU path:
// every FP8 E4M3 byte x every scale byte, both rules, against values built
// from the formats' definitions (double arithmetic, a bf16 rounding written
// here), not from core/model/row_format.cc.
//   vLLM: the byte is a float's exponent bits: 0 -> +0, 255 -> +inf
//     (tests/distributed/test_engram_dp_shard.py `_reference`: `(scales << 23).view(float32)`).
//   SGLang: torch float8_e8m0fnu: 0 -> 2^-127, 255 -> NaN (its Triton
//     engram_gather: `_E8M0_ZERO = 2.0**-127`, `tl.where(exps == 255, nan, scale)`).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "core/backend/device_compute.h"
#include "core/lookup/lookup_rows.h"
#include "core/lookup/shard_layout.h"
#include "core/model/row_format.h"
#include "core/model/table_spec.h"
#include "kernels/gather_reference.h"

namespace engram {
namespace {

constexpr ScaleByteRule kRules[] = {ScaleByteRule::kVllm, ScaleByteRule::kSglang, ScaleByteRule::kSglangTorch};

// OCP E4M3fn: bias 7, no infinity, S.1111.111 is NaN, subnormals m/8 * 2^-6.
double fp8_by_definition(int code) {
  const int e = (code >> 3) & 0xf, m = code & 7;
  double magnitude;
  if (e == 0xf && m == 7) magnitude = std::numeric_limits<double>::quiet_NaN();
  else if (e == 0) magnitude = std::ldexp(m, -9);
  else magnitude = std::ldexp(8 + m, e - 10);
  return (code & 0x80) ? -magnitude : magnitude;
}

double scale_by_definition(int byte, ScaleByteRule rule) {
  if (byte == 0) return rule == ScaleByteRule::kVllm ? 0.0 : std::ldexp(1.0, -127);
  if (byte == 255)
    return rule == ScaleByteRule::kSglangTorch ? std::numeric_limits<double>::quiet_NaN()
                                               : std::numeric_limits<double>::infinity();
  return std::ldexp(1.0, byte - 127);
}

// bf16 (8 significant bits, float's exponent range, subnormals m * 2^-133)
// by round to nearest even from an exact double.
uint16_t bf16_by_definition(double value) {
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const double a = std::fabs(value);
  if (std::isinf(a)) return sign | 0x7f80;
  if (a == 0) return sign;
  int e2 = 0;
  std::frexp(a, &e2);
  const int exponent = e2 - 1;                        // a in [2^exponent, 2^(exponent+1))
  const int quantum = exponent < -126 ? -133 : exponent - 7;
  const double n = std::ldexp(a, -quantum);           // exact
  double r = std::floor(n);
  const double rest = n - r;
  if (rest > 0.5 || (rest == 0.5 && std::fmod(r, 2.0) == 1.0)) r += 1;
  const double rounded = std::ldexp(r, quantum);
  if (rounded < std::ldexp(1.0, -126)) return sign | static_cast<uint16_t>(r);  // subnormal (or 0)
  std::frexp(rounded, &e2);
  const int field = e2 - 1 + 127;
  if (field >= 255) return sign | 0x7f80;
  const int mantissa = static_cast<int>(std::ldexp(rounded, -(e2 - 1 - 7))) - 128;
  return sign | static_cast<uint16_t>((field << 7) | mantissa);
}

// What every lookup path must write (docs/design.md section 4): -0 as +0, NaN
// as 0x7fc0 with the FP8 byte's sign.
uint16_t expected_lookup(int code, int scale_byte, ScaleByteRule rule) {
  const double product = fp8_by_definition(code) * scale_by_definition(scale_byte, rule);
  if (std::isnan(product)) return static_cast<uint16_t>(0x7fc0 | ((code & 0x80) << 8));
  const uint16_t bits = bf16_by_definition(product);
  return bits == 0x8000 ? 0 : bits;
}

uint16_t canonical(uint16_t bits) { return bf16_lookup_canonical(bits); }

// A table of 256 rows of 256 values: row e holds every FP8 code once, every
// block scaled by byte e.
TableSpec all_bytes_table(ScaleByteRule rule) {
  TableSpec t;
  t.layer_id = 1;
  t.orders = {2};
  t.heads_per_order = 1;
  t.primes = {256};
  t.row_format = RowFormat::kFp8E4M3Ue8m0;
  t.dim = 256;
  t.scale_byte_rule = rule;
  return t;
}
std::vector<std::byte> all_bytes_rows(const TableSpec& t) {
  std::vector<std::byte> rows(t.table_bytes());
  for (int e = 0; e < 256; ++e) {
    std::byte* row = rows.data() + static_cast<size_t>(e) * t.row_bytes();
    for (int code = 0; code < 256; ++code) row[code] = static_cast<std::byte>(code);
    for (int block = 0; block < t.dim / kScaleBlock; ++block) row[t.dim + block] = static_cast<std::byte>(e);
  }
  return rows;
}
std::vector<uint16_t> expected_rows(ScaleByteRule rule) {
  std::vector<uint16_t> want(256 * 256);
  for (int e = 0; e < 256; ++e)
    for (int code = 0; code < 256; ++code) want[static_cast<size_t>(e) * 256 + code] = expected_lookup(code, e, rule);
  return want;
}

TEST(ScaleByteRule, TheReferenceItselfAgreesWithTheEnginesNamedFacts) {
  // SGLang's scale-byte test asserts 2^-127 for byte 0; in bf16 that is the subnormal 64 * 2^-133.
  EXPECT_EQ(expected_lookup(0x38, 0, ScaleByteRule::kSglang), 0x0040);  // 1.0 * 2^-127
  EXPECT_EQ(expected_lookup(0x38, 0, ScaleByteRule::kVllm), 0x0000);    // 1.0 * +0
  EXPECT_EQ(expected_lookup(0x38, 255, ScaleByteRule::kVllm), 0x7f80);  // 1.0 * +inf
  EXPECT_EQ(expected_lookup(0x00, 255, ScaleByteRule::kVllm), 0x7fc0);  // 0 * inf
  EXPECT_EQ(expected_lookup(0x38, 255, ScaleByteRule::kSglang), 0x7f80);       // its CUDA kernel: +inf
  EXPECT_EQ(expected_lookup(0x38, 255, ScaleByteRule::kSglangTorch), 0x7fc0);  // its torch fallback: NaN
  EXPECT_EQ(expected_lookup(0xb8, 127, ScaleByteRule::kSglang), 0xbf80);  // -1.0
  EXPECT_EQ(expected_lookup(0x7e, 254, ScaleByteRule::kVllm), 0x7f80);    // 448 * 2^127 overflows
}

TEST(ScaleByteRule, ScaleBytesDecodeByTheRule) {
  for (ScaleByteRule rule : kRules) {
    for (int e = 0; e < 256; ++e) {
      const float got = ue8m0_to_float(static_cast<uint8_t>(e), rule);
      const double want = scale_by_definition(e, rule);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << e;
      } else {
        EXPECT_EQ(static_cast<double>(got), want) << scale_byte_rule_name(rule) << " " << e;
        EXPECT_FALSE(std::signbit(got)) << e;
      }
    }
  }
}

TEST(ScaleByteRule, EveryFp8ByteTimesEveryScaleByteForBothRules) {
  for (ScaleByteRule rule : kRules) {
    int mismatches = 0;
    for (int e = 0; e < 256; ++e)
      for (int code = 0; code < 256; ++code) {
        const uint16_t got = canonical(dequantize_fp8_e4m3_to_bf16(static_cast<uint8_t>(code), static_cast<uint8_t>(e), rule));
        const uint16_t want = expected_lookup(code, e, rule);
        if (got != want && ++mismatches <= 8)
          ADD_FAILURE() << scale_byte_rule_name(rule) << " fp8 0x" << std::hex << code << " scale " << std::dec << e
                        << ": got 0x" << std::hex << got << " want 0x" << want;
      }
    EXPECT_EQ(mismatches, 0) << scale_byte_rule_name(rule);
  }
}

// The CPU row loop (its fast path covers bytes 10..246, the rest go through
// the decoder) and the kernels' CPU reference, which the emulator runs.
TEST(ScaleByteRule, RowLoopAndKernelReferenceFollowTheTablesRule) {
  for (ScaleByteRule rule : kRules) {
    const TableSpec t = all_bytes_table(rule);
    const std::vector<std::byte> rows = all_bytes_rows(t);
    const std::vector<uint16_t> want = expected_rows(rule);
    std::vector<uint16_t> by_row(want.size()), by_reference(want.size());
    for (int e = 0; e < 256; ++e) {
      const auto row = std::span(rows).subspan(static_cast<size_t>(e) * t.row_bytes(), t.row_bytes());
      dequantize_row(t, row, std::span(by_row).subspan(static_cast<size_t>(e) * 256, 256));
      kernels::row_reference(t, row, std::span(by_reference).subspan(static_cast<size_t>(e) * 256, 256));
    }
    EXPECT_TRUE(by_row == want) << "dequantize_row, " << scale_byte_rule_name(rule);
    EXPECT_TRUE(by_reference == want) << "kernels::row_reference, " << scale_byte_rule_name(rule);
  }
}

// The lookups the host placements are built from: the whole table
// (host_shared, host_private), a TP row range, and host_head_sharded's head
// shard. Every row id once, DEAD last (a zero row under both rules).
TEST(ScaleByteRule, HostLookupsFollowTheTablesRule) {
  for (ScaleByteRule rule : kRules) {
    const TableSpec t = all_bytes_table(rule);
    const std::vector<std::byte> rows = all_bytes_rows(t);
    std::vector<uint16_t> want = expected_rows(rule);
    std::vector<int64_t> ids;
    for (int64_t r = 0; r < 256; ++r) ids.push_back(r);
    ids.push_back(kDeadId);
    want.resize(want.size() + 256, 0);

    std::vector<uint16_t> whole(want.size()), range(want.size()), head_shard(want.size());
    lookup_rows_whole_table(t, rows, ids, whole);
    lookup_rows_in_range(t, 0, t.row_count(), rows, ids, range);
    lookup_rows_head_shard(t, HeadRange{0, 1}, 0, rows, ids, head_shard);
    EXPECT_TRUE(whole == want) << "lookup_rows_whole_table, " << scale_byte_rule_name(rule);
    EXPECT_TRUE(range == want) << "lookup_rows_in_range, " << scale_byte_rule_name(rule);
    EXPECT_TRUE(head_shard == want) << "lookup_rows_head_shard, " << scale_byte_rule_name(rule);
  }
}

TEST(ScaleByteRule, DefaultIsVllmAndTheDeviceLayoutCarriesTheRule) {
  EXPECT_EQ(TableSpec{}.scale_byte_rule, ScaleByteRule::kVllm);
  EXPECT_EQ(scale_byte_rule_name(ScaleByteRule::kVllm), "vllm");
  EXPECT_EQ(scale_byte_rule_name(ScaleByteRule::kSglang), "sglang");
  EXPECT_EQ(scale_byte_rule_name(ScaleByteRule::kSglangTorch), "sglang_torch");
  for (ScaleByteRule rule : kRules) EXPECT_EQ(device_row_layout(all_bytes_table(rule)).scale_byte_rule, rule);
}

}  // namespace
}  // namespace engram
