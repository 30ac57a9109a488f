#include "core/model/row_format.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/base/bf16.h"

namespace engram {
namespace {

// Independent E4M3fn decode from the format's definition.
double decode_by_definition(uint8_t code) {
  const int sign = code >> 7, e = (code >> 3) & 0xf, m = code & 7;
  double magnitude = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return sign ? -magnitude : magnitude;
}

TEST(RowFormat, Fp8DecodeMatchesTheDefinitionForAllCodes) {
  for (int code = 0; code < 256; ++code) {
    const float v = fp8_e4m3_to_float(static_cast<uint8_t>(code));
    if ((code & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(v)) << code;
      continue;
    }
    EXPECT_EQ(static_cast<double>(v), decode_by_definition(static_cast<uint8_t>(code))) << code;
    EXPECT_EQ(std::signbit(v), code >= 0x80) << code;
  }
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(std::bit_cast<uint32_t>(fp8_e4m3_to_float(0x80)), 0x80000000u);  // -0
}

TEST(RowFormat, Ue8m0IsTheExponentByte) {
  EXPECT_EQ(ue8m0_to_float(127, ScaleByteRule::kVllm), 1.0f);
  EXPECT_EQ(ue8m0_to_float(130, ScaleByteRule::kVllm), 8.0f);
  EXPECT_EQ(ue8m0_to_float(1, ScaleByteRule::kVllm), std::ldexp(1.0f, -126));
  EXPECT_EQ(std::bit_cast<uint32_t>(ue8m0_to_float(0, ScaleByteRule::kVllm)), 0u);  // +0
  EXPECT_TRUE(std::isinf(ue8m0_to_float(255, ScaleByteRule::kVllm)));
}

TEST(RowFormat, DequantiseSpecialCases) {
  EXPECT_EQ(dequantize_fp8_e4m3_to_bf16(0x38, 127, ScaleByteRule::kVllm), 0x3f80);  // 1.0
  EXPECT_EQ(dequantize_fp8_e4m3_to_bf16(0x7e, 127, ScaleByteRule::kVllm), float_to_bf16(448.0f));
  EXPECT_EQ(dequantize_fp8_e4m3_to_bf16(0xb8, 128, ScaleByteRule::kVllm), 0xc000);  // -1 * 2 = -2
  EXPECT_EQ(dequantize_fp8_e4m3_to_bf16(0x38, 0, ScaleByteRule::kVllm), 0x0000);    // scale +0
  EXPECT_EQ(dequantize_fp8_e4m3_to_bf16(0xb8, 0, ScaleByteRule::kVllm), 0x8000);    // -1 * +0 = -0: kept here, the lookup makes it +0
  EXPECT_EQ(dequantize_fp8_e4m3_to_bf16(0x80, 127, ScaleByteRule::kVllm), 0x8000);
  EXPECT_EQ(dequantize_fp8_e4m3_to_bf16(0x38, 255, ScaleByteRule::kVllm), 0x7f80);  // * inf
  EXPECT_EQ(dequantize_fp8_e4m3_to_bf16(0x00, 255, ScaleByteRule::kVllm), 0x7fc0);  // 0 * inf: NaN with the FP8 sign
  EXPECT_EQ(dequantize_fp8_e4m3_to_bf16(0x80, 255, ScaleByteRule::kVllm), 0xffc0);
  EXPECT_EQ(dequantize_fp8_e4m3_to_bf16(0x7f, 127, ScaleByteRule::kVllm), 0x7fc0);  // FP8 NaN
  EXPECT_EQ(dequantize_fp8_e4m3_to_bf16(0xff, 3, ScaleByteRule::kVllm), 0xffc0);
  EXPECT_EQ(dequantize_fp8_e4m3_to_bf16(0x7e, 254, ScaleByteRule::kVllm), 0x7f80);  // 448 * 2^127 overflows float
  // 7 * 2^-9 * 2^-126 = 1.75 * 2^-133: a float subnormal that rounds (RNE) to
  // the bf16 subnormal 2 * 2^-133.
  EXPECT_EQ(dequantize_fp8_e4m3_to_bf16(0x07, 1, ScaleByteRule::kVllm), 0x0002);
  // 2^-9 * 2^-126 = 0.25 * 2^-133 rounds to +0; 3 * 2^-135 = 0.75 * 2^-133
  // rounds up to bf16's smallest subnormal.
  EXPECT_EQ(dequantize_fp8_e4m3_to_bf16(0x01, 1, ScaleByteRule::kVllm), 0x0000);
  EXPECT_EQ(dequantize_fp8_e4m3_to_bf16(0x03, 1, ScaleByteRule::kVllm), 0x0001);
  EXPECT_EQ(dequantize_fp8_e4m3_to_bf16(0x83, 1, ScaleByteRule::kVllm), 0x8001);
}

TEST(RowFormat, DequantiseEqualsTheFormulaForEveryCodeAndManyScales) {
  for (int scale = 0; scale < 256; scale += 3) {
    for (int code = 0; code < 256; ++code) {
      const float product = fp8_e4m3_to_float(static_cast<uint8_t>(code)) * ue8m0_to_float(static_cast<uint8_t>(scale), ScaleByteRule::kVllm);
      const uint16_t got = dequantize_fp8_e4m3_to_bf16(static_cast<uint8_t>(code), static_cast<uint8_t>(scale), ScaleByteRule::kVllm);
      if (std::isnan(product)) {
        EXPECT_EQ(got, static_cast<uint16_t>(0x7fc0 | ((code & 0x80) << 8))) << code << " " << scale;
      } else {
        EXPECT_EQ(got, float_to_bf16(product)) << code << " " << scale;
      }
    }
  }
}

// dequantize_row has a shifted-exponent fast path for most scales: it must
// equal the per-value rule for every code at every scale.
TEST(RowFormat, DequantiseRowEqualsThePerValueRuleAtEveryScale) {
  const int dim = 256;
  std::vector<std::byte> row(row_bytes_for(RowFormat::kFp8E4M3Ue8m0, dim));
  for (int i = 0; i < dim; ++i) row[static_cast<size_t>(i)] = static_cast<std::byte>(i);
  std::vector<uint16_t> out(dim);
  for (int e = 0; e < 256; ++e) {
    for (int b = 0; b < dim / 32; ++b) row[static_cast<size_t>(dim + b)] = static_cast<std::byte>(e);
    dequantize_row(RowFormat::kFp8E4M3Ue8m0, dim, ScaleByteRule::kVllm, row, out);
    for (int code = 0; code < 256; ++code) {
      uint16_t want = dequantize_fp8_e4m3_to_bf16(static_cast<uint8_t>(code), static_cast<uint8_t>(e), ScaleByteRule::kVllm);
      if (want == 0x8000) want = 0;
      ASSERT_EQ(out[static_cast<size_t>(code)], want) << "code " << code << " scale " << e;
    }
  }
}

TEST(RowFormat, EncodeRoundsToNearestEvenAndSaturates) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    EXPECT_EQ(float_to_fp8_e4m3(fp8_e4m3_to_float(static_cast<uint8_t>(code)), Fp8Overflow::kSaturate), code);
  }
  EXPECT_EQ(float_to_fp8_e4m3(1.0625f, Fp8Overflow::kSaturate), 0x38);  // tie 1.0 / 1.125 -> even 1.0
  EXPECT_EQ(float_to_fp8_e4m3(1.1875f, Fp8Overflow::kSaturate), 0x3a);  // tie 1.125 / 1.25 -> even 1.25
  EXPECT_EQ(float_to_fp8_e4m3(1.05f, Fp8Overflow::kSaturate), 0x38);  // below the midpoint 1.0625
  EXPECT_EQ(float_to_fp8_e4m3(1.07f, Fp8Overflow::kSaturate), 0x39);  // above it
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -10), Fp8Overflow::kSaturate), 0x00);    // tie 0 / 2^-9 -> 0
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.5f, -10), Fp8Overflow::kSaturate), 0x01);
  EXPECT_EQ(float_to_fp8_e4m3(-std::ldexp(3.0f, -10), Fp8Overflow::kSaturate), 0x82);  // tie 1/2 subnormal -> 2
  EXPECT_EQ(float_to_fp8_e4m3(-0.0f, Fp8Overflow::kSaturate), 0x80);
  EXPECT_EQ(float_to_fp8_e4m3(460.0f, Fp8Overflow::kNan), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(464.0f, Fp8Overflow::kNan), 0x7e);  // tie 448 / (480): even wins
  EXPECT_EQ(float_to_fp8_e4m3(465.0f, Fp8Overflow::kNan), 0x7f);
  EXPECT_EQ(float_to_fp8_e4m3(-1e6f, Fp8Overflow::kNan), 0xff);
  EXPECT_EQ(float_to_fp8_e4m3(-1e6f, Fp8Overflow::kSaturate), 0xfe);
  EXPECT_EQ(float_to_fp8_e4m3(INFINITY, Fp8Overflow::kSaturate), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(NAN, Fp8Overflow::kSaturate), 0x7f);
}

TEST(RowFormat, ScaleChoiceBringsTheBlockWithin448) {
  std::vector<float> block(32, 0.0f);
  EXPECT_EQ(choose_ue8m0_scale(block), 127);
  block[3] = 448.0f;
  EXPECT_EQ(choose_ue8m0_scale(block), 127);
  block[3] = -449.0f;
  EXPECT_EQ(choose_ue8m0_scale(block), 128);
  block[3] = 1.0f;  // 448 * 2^-8 = 1.75 >= 1 > 448 * 2^-9
  EXPECT_EQ(choose_ue8m0_scale(block), 119);
  block[5] = NAN;  // NaN does not pick the scale
  EXPECT_EQ(choose_ue8m0_scale(block), 119);
}

TEST(RowFormat, RowsRoundTripAndLookupsWriteNegativeZeroAsPositive) {
  const int dim = 64;
  std::vector<float> values(dim);
  for (int i = 0; i < dim; ++i) values[static_cast<size_t>(i)] = static_cast<float>((i % 7) - 3) * 0.5f;
  values[0] = -0.0f;
  values[40] = 384.0f;  // block 1 scale 1: exact in E4M3
  for (RowFormat format : {RowFormat::kFp8E4M3Ue8m0, RowFormat::kBf16}) {
    std::vector<std::byte> row(row_bytes_for(format, dim));
    encode_row(format, values, row);
    std::vector<uint16_t> out(dim);
    dequantize_row(format, dim, ScaleByteRule::kVllm, row, out);
    EXPECT_EQ(out[0], 0x0000) << "-0 is written as +0";
    for (int i = 1; i < dim; ++i)
      EXPECT_EQ(out[static_cast<size_t>(i)], float_to_bf16(values[static_cast<size_t>(i)])) << i;
  }
  EXPECT_EQ(row_bytes_for(RowFormat::kFp8E4M3Ue8m0, 256), 264u);
  EXPECT_EQ(row_bytes_for(RowFormat::kBf16, 256), 512u);
}

TEST(RowFormat, DequantiseRowEqualsPerValueRuleWithCanonicalZerosAndNans) {
  const int dim = 256;
  std::vector<std::byte> row(row_bytes_for(RowFormat::kFp8E4M3Ue8m0, dim));
  for (int i = 0; i < dim; ++i) row[static_cast<size_t>(i)] = static_cast<std::byte>(i);
  const uint8_t scales[8] = {0, 1, 100, 127, 140, 200, 254, 255};
  for (int b = 0; b < 8; ++b) row[static_cast<size_t>(dim + b)] = static_cast<std::byte>(scales[b]);
  std::vector<uint16_t> out(dim);
  dequantize_row(RowFormat::kFp8E4M3Ue8m0, dim, ScaleByteRule::kVllm, row, out);
  for (int i = 0; i < dim; ++i) {
    uint16_t want = dequantize_fp8_e4m3_to_bf16(static_cast<uint8_t>(i), scales[i / 32], ScaleByteRule::kVllm);
    if (want == 0x8000) want = 0;
    EXPECT_EQ(out[static_cast<size_t>(i)], want) << i;
    EXPECT_NE(out[static_cast<size_t>(i)], 0x8000);
  }
  // bf16 rows: NaN payloads become canonical, the sign kept; -0 becomes +0.
  std::vector<uint16_t> bf16_values = {0x8000, 0xffc1, 0x7f81, 0x0001, 0x7f80, 0x3f80};
  std::vector<std::byte> bf16_row(bf16_values.size() * 2);
  std::memcpy(bf16_row.data(), bf16_values.data(), bf16_row.size());
  std::vector<uint16_t> bf16_out(bf16_values.size());
  dequantize_row(RowFormat::kBf16, static_cast<int>(bf16_values.size()), ScaleByteRule::kVllm, bf16_row, bf16_out);
  EXPECT_EQ(bf16_out, (std::vector<uint16_t>{0x0000, 0xffc0, 0x7fc0, 0x0001, 0x7f80, 0x3f80}));
}

}  // namespace
}  // namespace engram
