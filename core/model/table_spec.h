// The Engram hash-embedding tables: what a table is made of (heads, primes,
// row format) and the model presets. docs/design.md section 1.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/status.h"

namespace engram {

enum class RowFormat : uint8_t {
  kFp8E4M3Ue8m0,  // `dim` FP8 E4M3 values then dim/32 UE8M0 scale bytes
  kBf16,          // `dim` plain bf16 values
};

inline constexpr int kScaleBlock = 32;  // FP8 values per UE8M0 scale

// How a UE8M0 scale byte's two ends decode; bytes 1..254 are 2^(e-127) under
// both. The engines disagree, so a table says which engine's bytes it holds.
enum class ScaleByteRule : uint8_t {
  kVllm,         // the exponent bits alone: 0 -> +0, 255 -> +inf (vLLM's reference, our CUDA kernels)
  kSglang,       // SGLang's CUDA engram_gather: 0 -> 2^-127 (its _E8M0_ZERO), 255 -> +inf (the exponent bits)
  kSglangTorch,  // SGLang's torch fallback (ROCm but gfx950, CPU), torch float8_e8m0fnu: 0 -> 2^-127, 255 -> NaN
};
std::string_view scale_byte_rule_name(ScaleByteRule rule);  // "vllm", "sglang", "sglang_torch"
// What a -0 value becomes on the way out. engramlab's own rule writes +0 on
// every path, so every path equals its collective one (a sum with +0 makes
// -0 +0). vLLM only gathers rows, so -0 stays -0 on every path. SGLang keeps
// it where it reads rows and loses it where its all-reduce adds +0.
enum class MinusZeroRule : uint8_t {
  kWritePlusZero,  // -0 -> +0 on every path (engramlab)
  // -0 stays 0x8000 on every path, a collective lookup's included: its
  // members' rows are combined bit for bit (the holder's bits, zero bytes
  // from the others), never summed (vLLM; SGLang where nothing is summed).
  kKeep,
  // An engine's rule, resolved per lookup path (lookup_minus_zero in
  // core/engines/engine_profile.h) to kKeep, or kWritePlusZero where the path
  // sums every member's rows over more than one member (SGLang's all-reduce
  // adds +0). Unresolved it reads rows as kKeep and sums as kWritePlusZero.
  kKeepUnlessSummed,
};
std::string_view minus_zero_rule_name(MinusZeroRule rule);  // "plus_zero", "keep", "keep_unless_summed"
// Whether rows are read with -0 kept (kKeep and kKeepUnlessSummed).
inline bool keeps_minus_zero(MinusZeroRule rule) { return rule != MinusZeroRule::kWritePlusZero; }
// Which rule an engine decodes by is its profile's (core/engines/engine_profile.h).

struct TableSpec {
  int layer_id = 0;
  std::vector<int> orders;              // n-gram orders, e.g. {2,3,4}
  int heads_per_order = 0;              // hash heads per order
  std::vector<int64_t> primes;          // rows per head, in (order, head) order
  RowFormat row_format = RowFormat::kFp8E4M3Ue8m0;
  int dim = 0;                          // values per row
  ScaleByteRule scale_byte_rule = ScaleByteRule::kVllm;  // FP8 rows only
  MinusZeroRule minus_zero = MinusZeroRule::kWritePlusZero;

  int head_count() const { return static_cast<int>(primes.size()); }
  int64_t row_count() const;            // sum of primes
  int64_t head_offset(int head) const;  // exclusive prefix sum of primes
  uint64_t row_bytes() const;           // 264 for V4.1 rows
  uint64_t table_bytes() const { return static_cast<uint64_t>(row_count()) * row_bytes(); }
  int order_of_head(int head) const { return orders[static_cast<size_t>(head / heads_per_order)]; }
};

// How a DEAD token (kDeadId: image tokens, idle DP slots, padding) enters
// the hash. The engines agree on kBarrier; the others are named so a run can
// choose them (see hashing.h for the exact rules).
enum class DeadTokenRule : uint8_t {
  kBarrier,       // vLLM, SGLang, the V4.1 reference: DEAD reads as the pad id and so does all before it
  kBarrierNoRow,  // kBarrier's lookback, but a DEAD token's own ids are DEAD: it reads no row
  kLiteral,       // engram_demo_v1: -1 is hashed as the value -1, numpy's floor modulo keeps rows in range
};

std::string_view dead_token_rule_name(DeadTokenRule rule);  // "barrier", "barrier_no_row", "literal"
std::optional<DeadTokenRule> parse_dead_token_rule(std::string_view text);
// For error messages: the names and what each means.
inline constexpr std::string_view kDeadTokenRuleChoices =
    "barrier (as vLLM and SGLang hash), barrier_no_row (the same, but a DEAD token reads no row) or literal (as "
    "engram_demo_v1 hashes -1)";

// Bounds on what a model may say, so every accepted model draws its primes
// fast and its sizes fit in 64 bits.
inline constexpr int64_t kMaxEngramVocabSize = int64_t{1} << 40;
inline constexpr int kMaxHeadsPerOrder = 1024;
inline constexpr int kMaxHashOrder = 8;  // n-gram orders are 1..kMaxHashOrder
inline constexpr int kMaxEngramLayers = 64;
inline constexpr int kMaxLayerId = 100000;
inline constexpr int kMaxRowDim = 65536;

// What the KV-cache figures of a plan need from the model beyond its
// Engram tables (model files' `serving:` section; unset: not counted).
struct ServingFigures {
  std::vector<std::pair<int, uint64_t>> weights_bytes_per_gpu_by_tp;  // (tp, bytes per GPU), tp ascending
  uint64_t kv_bytes_per_token = 0;                                    // 0: not given
  std::string source;                                                 // where the figures come from
  // The weights per GPU at `tp`, when the model gives them for it.
  std::optional<uint64_t> weights_bytes_per_gpu(int tp) const;
};

struct ModelSpec {
  std::string name;
  // Table structure: each n-gram order's prime search starts at its
  // engram vocabulary size - 1 (the reference's per-order table size).
  int64_t engram_vocab_size = 0;                  // the first order's (all orders' in the presets)
  std::vector<int64_t> engram_vocab_size_per_order;
  std::vector<TableSpec> tables;

  // Token space: what the ids fed to the hash are.
  int64_t compressed_vocab_size = 0;  // token ids are [0, compressed_vocab_size); it bounds the multipliers
  int64_t pad_id = 0;                 // the compressed id of the tokenizer's pad token
  DeadTokenRule dead_token_rule = DeadTokenRule::kBarrier;
  uint64_t seed = 0;                  // multipliers from numpy default_rng(seed + 10007 * layer_id)

  ServingFigures serving;
  std::string source_path;            // the model file it came from ("" for a built-in)

  uint64_t table_bytes_total() const;
  int max_order() const;
};

inline constexpr int64_t kDeadId = -1;  // image tokens, idle DP slots, padding

// Primes for a model: drawn in (layer, order, head) order; each order restarts
// the search just above `engram_vocab_size - 1` and skips primes already used.
std::vector<std::vector<int64_t>> draw_primes(int64_t engram_vocab_size, int layer_count,
                                              int order_count, int heads_per_order);
// What a prime search did: each number from a start up to the last prime
// drawn from it is tested once per distinct start, however many orders and
// layers restart there.
struct PrimeSearchWork {
  uint64_t primality_tests = 0;
  size_t distinct_starts = 0;
};
// The same with each order's own starting size (each in 2..kMaxEngramVocabSize).
std::vector<std::vector<int64_t>> draw_primes(const std::vector<int64_t>& engram_vocab_size_per_order, int layer_count,
                                              int heads_per_order, PrimeSearchWork* work = nullptr);

// Builds a spec from its structure, drawing the primes. The token space is
// the test-sized default: compressed_vocab_size = engram_vocab_size, pad id 0,
// DEAD rule kBarrier; set the fields and call validate() to choose others.
// Errors name the field.
Result<ModelSpec> make_model_spec(std::string name, int64_t engram_vocab_size, std::vector<int> layer_ids,
                                  std::vector<int> orders, int heads_per_order, RowFormat format,
                                  int dim, uint64_t seed);
// With one engram vocabulary size per order; every value bounded (errors name the field).
Result<ModelSpec> make_model_spec(std::string name, std::vector<int64_t> engram_vocab_size_per_order,
                                  std::vector<int> layer_ids, std::vector<int> orders, int heads_per_order,
                                  RowFormat format, int dim, uint64_t seed);

// A model by name or by file: a name is one of the model files shipped in
// models/ (compiled in: model_preset_names()); anything ending in .yaml or
// .yml, or holding a '/', is a model file read from that path
// (core/model/model_file.h). Built once per name and, for a file, per
// file identity: an edited file is read again (table_spec.cc says why).
Result<ModelSpec> model_preset(const std::string& name);
std::vector<std::string> model_preset_names();
// True when `name` is to be read as a model file's path.
bool names_a_model_file(std::string_view name);

Status validate(const ModelSpec& spec);

// The index in spec.tables of Engram layer `layer_id`; invalid_argument
// naming the model's layers when it has none such. `field` names the
// argument in the error ("layer").
Result<int> table_index_of_layer(const ModelSpec& spec, int layer_id, std::string_view field);

bool is_prime(int64_t n);

}  // namespace engram
