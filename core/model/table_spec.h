// The Engram hash-embedding tables: what a table is made of (heads, primes,
// row format) and the model presets. DESIGN.md section 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace engram {

enum class RowFormat : uint8_t {
  kFp8E4M3Ue8m0,  // `dim` FP8 E4M3 values then dim/32 UE8M0 scale bytes
  kBf16,          // `dim` plain bf16 values
};

inline constexpr int kScaleBlock = 32;  // FP8 values per UE8M0 scale

struct TableSpec {
  int layer_id = 0;
  std::vector<int> orders;              // n-gram orders, e.g. {2,3,4}
  int heads_per_order = 0;              // hash heads per order
  std::vector<int64_t> primes;          // rows per head, in (order, head) order
  RowFormat row_format = RowFormat::kFp8E4M3Ue8m0;
  int dim = 0;                          // values per row

  int head_count() const { return static_cast<int>(primes.size()); }
  int64_t row_count() const;            // sum of primes
  int64_t head_offset(int head) const;  // exclusive prefix sum of primes
  uint64_t row_bytes() const;           // 264 for V4.1 rows
  uint64_t table_bytes() const { return static_cast<uint64_t>(row_count()) * row_bytes(); }
  int order_of_head(int head) const { return orders[static_cast<size_t>(head / heads_per_order)]; }
};

struct ModelSpec {
  std::string name;
  int64_t vocab_size = 0;  // compressed vocabulary; the pad id is vocab_size - 1
  std::vector<TableSpec> tables;
  uint64_t seed = 0;       // seeds the hash multipliers

  uint64_t table_bytes_total() const;
  int64_t pad_id() const { return vocab_size - 1; }
  int max_order() const;
};

inline constexpr int64_t kDeadId = -1;  // image tokens, idle DP slots, padding

// Primes for a model: drawn in (layer, order, head) order; each order restarts
// the search just above `vocab_size - 1` and skips primes already used.
std::vector<std::vector<int64_t>> draw_primes(int64_t vocab_size, int layer_count,
                                              int order_count, int heads_per_order);

// Builds a spec from its structure, drawing the primes. Errors name the field.
Result<ModelSpec> make_model_spec(std::string name, int64_t vocab_size, std::vector<int> layer_ids,
                                  std::vector<int> orders, int heads_per_order, RowFormat format,
                                  int dim, uint64_t seed);

// "deepseek-v4.1-flash", "tiny" (a test-sized table of the same structure).
Result<ModelSpec> model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

Status validate(const ModelSpec& spec);

bool is_prime(int64_t n);

}  // namespace engram
