// The ids a rank's device lookup is checked and timed with, and the checks
// of what it wrote against the CPU reference of the table fill. Shared by the
// acceptance test and the bench (operator_checks/acceptance_rank.h,
// operator_checks/bench_rank.h), so both look up the same kinds of ids.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/model/table_spec.h"

namespace engram::operator_checks {

// Rows of head 0 whose stored codes hold -0 and NaN (-1 where none is found
// near the head's start; the fill puts special codes in one row of four).
struct SpecialRows {
  int64_t negative_zero = -1;
  int64_t nan = -1;
};
SpecialRows find_special_rows(const TableSpec& table, uint64_t fill_seed);

// Ids [tokens][heads]: rows of each head's own range (as the hash gives),
// with DEAD ids, out-of-table ids, negative ids and the -0 and NaN rows at
// fixed strides. The same (table, tokens, seed) gives the same ids.
struct LookupTestIds {
  std::vector<int64_t> ids;
  std::vector<int64_t> special_slots;  // always checked against the reference
};
LookupTestIds make_lookup_test_ids(const TableSpec& table, int tokens, uint64_t seed, const SpecialRows& special);

// The slots checked: every special slot and up to `sampled` more, evenly
// spread; sorted, each once.
std::vector<int64_t> slots_to_check(const LookupTestIds& ids, int sampled);

// `got` (slots x dim bf16, what the lookup wrote for ids.ids) against the CPU
// reference on `slots`: one text per mismatching slot ("slot 7 (id 123)
// element 4: want 0x3f80, got 0x0000"), at most `max_mismatches`.
std::vector<std::string> check_against_cpu_reference(const TableSpec& table, uint64_t fill_seed,
                                                     const LookupTestIds& ids, std::span<const int64_t> slots,
                                                     std::span<const uint16_t> got, size_t max_mismatches = 4);

// The first differing element of two outputs of `dim` values per slot
// ("slot 3 element 17: 0x0000 vs 0x3f80"), or "" when equal.
std::string first_byte_difference(std::span<const uint16_t> a, std::span<const uint16_t> b, int dim);

}  // namespace engram::operator_checks
