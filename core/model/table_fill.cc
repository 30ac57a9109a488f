#include "core/model/table_fill.h"

#include <cstring>

#include "core/base/splitmix64.h"
#include "core/base/status.h"

namespace engram {
namespace {

// E4M3fn codes the semantics care about: +-0, subnormals, the largest
// normals (+-448), NaN.
constexpr uint8_t kFp8Specials[] = {0x00, 0x80, 0x01, 0x81, 0x07, 0x87, 0x08, 0x7e, 0xfe, 0x7f, 0xff, 0x38, 0xb8};
// bf16: -0, canonical and non-canonical NaN, subnormals, max finite, inf.
constexpr uint16_t kBf16Specials[] = {0x0000, 0x8000, 0x7fc0, 0xffc1, 0x7f81, 0x0001, 0x8001,
                                      0x007f, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x3f80, 0xbf80};

uint8_t draw_scale(uint64_t& state) {
  const uint64_t draw = splitmix64_next(state);
  switch (draw % 64) {
    case 0: return 0;    // scale +0: every value becomes +-0 (or NaN)
    case 1: return 255;  // scale +inf: infinities, and 0 * inf = NaN
    case 2: return 1;    // results in the float subnormal range
    case 3: return 254;  // results past bf16's finite range
    default: return static_cast<uint8_t>(127 - 24 + static_cast<int>((draw >> 8) % 33));  // 2^-24 .. 2^8
  }
}

}  // namespace

void fill_table_rows(const TableSpec& table, uint64_t seed, int64_t first_row, std::span<std::byte> rows_bytes) {
  const uint64_t row_bytes = table.row_bytes();
  ENGRAM_CHECK(row_bytes > 0 && rows_bytes.size() % row_bytes == 0);
  ENGRAM_CHECK(first_row >= 0);
  const int64_t rows = static_cast<int64_t>(rows_bytes.size() / row_bytes);
  ENGRAM_CHECK(first_row + rows <= table.row_count());
  const uint64_t layer_seed = seed ^ (static_cast<uint64_t>(table.layer_id) * 0x9e3779b97f4a7c15ull);
  const size_t dim = static_cast<size_t>(table.dim);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t row = first_row + i;
    auto* out = reinterpret_cast<uint8_t*>(rows_bytes.data()) + static_cast<size_t>(i) * row_bytes;
    uint64_t state = splitmix64_at(layer_seed, static_cast<uint64_t>(row));
    // One row in four is dense with special values; the rest are random codes
    // (which still hit every special code now and then).
    const bool special_row = (splitmix64_next(state) & 3) == 0;
    if (table.row_format == RowFormat::kFp8E4M3Ue8m0) {
      for (size_t v = 0; v < dim; v += 8) {
        uint64_t bits = splitmix64_next(state);
        for (size_t b = 0; b < 8 && v + b < dim; ++b) {
          uint8_t code = static_cast<uint8_t>(bits >> (8 * b));
          if (special_row && (code & 1)) code = kFp8Specials[(code >> 1) % sizeof(kFp8Specials)];
          out[v + b] = code;
        }
      }
      for (size_t block = 0; block < dim / kScaleBlock; ++block) out[dim + block] = draw_scale(state);
    } else {
      for (size_t v = 0; v < dim; v += 4) {
        uint64_t bits = splitmix64_next(state);
        for (size_t b = 0; b < 4 && v + b < dim; ++b) {
          uint16_t value = static_cast<uint16_t>(bits >> (16 * b));
          if (special_row && (value & 1))
            value = kBf16Specials[(value >> 1) % (sizeof(kBf16Specials) / sizeof(kBf16Specials[0]))];
          std::memcpy(out + 2 * (v + b), &value, 2);
        }
      }
    }
  }
}

}  // namespace engram
