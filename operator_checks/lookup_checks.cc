#include "operator_checks/lookup_checks.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/base/bf16.h"
#include "core/base/splitmix64.h"
#include "core/model/table_fill.h"
#include "kernels/gather_reference.h"

namespace engram::operator_checks {
namespace {

int64_t find_row(const TableSpec& table, uint64_t fill_seed, int head, bool (*wanted)(const TableSpec&, const std::byte*)) {
  std::vector<std::byte> row(table.row_bytes());
  const int64_t first = table.head_offset(head);
  const int64_t last = first + std::min<int64_t>(table.primes[static_cast<size_t>(head)], 4096);
  for (int64_t r = first; r < last; ++r) {
    fill_table_rows(table, fill_seed, r, row);
    if (wanted(table, row.data())) return r;
  }
  return -1;
}

bool holds_negative_zero(const TableSpec& table, const std::byte* row) {
  for (int v = 0; v < table.dim; ++v) {
    if (table.row_format == RowFormat::kFp8E4M3Ue8m0 ? static_cast<uint8_t>(row[v]) == 0x80
                                                     : (static_cast<uint8_t>(row[2 * v]) == 0x00 &&
                                                        static_cast<uint8_t>(row[2 * v + 1]) == 0x80))
      return true;
  }
  return false;
}

bool holds_nan(const TableSpec& table, const std::byte* row) {
  for (int v = 0; v < table.dim; ++v) {
    if (table.row_format == RowFormat::kFp8E4M3Ue8m0) {
      if ((static_cast<uint8_t>(row[v]) & 0x7f) == 0x7f) return true;
    } else {
      const uint16_t b = static_cast<uint16_t>(static_cast<uint8_t>(row[2 * v]) |
                                               (static_cast<uint16_t>(static_cast<uint8_t>(row[2 * v + 1])) << 8));
      if ((b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0) return true;
    }
  }
  return false;
}

}  // namespace

SpecialRows find_special_rows(const TableSpec& table, uint64_t fill_seed) {
  return {find_row(table, fill_seed, 0, holds_negative_zero), find_row(table, fill_seed, 0, holds_nan)};
}

LookupTestIds make_lookup_test_ids(const TableSpec& table, int tokens, uint64_t seed, const SpecialRows& special) {
  const int heads = table.head_count();
  LookupTestIds out;
  out.ids.resize(static_cast<size_t>(tokens) * static_cast<size_t>(heads));
  for (int64_t s = 0; s < static_cast<int64_t>(out.ids.size()); ++s) {
    const int h = static_cast<int>(s % heads);
    const uint64_t draw = splitmix64_at(seed, static_cast<uint64_t>(s));
    int64_t id = table.head_offset(h) + static_cast<int64_t>(draw % static_cast<uint64_t>(table.primes[static_cast<size_t>(h)]));
    bool is_special = true;
    switch (s % 97) {
      case 0: id = kDeadId; break;
      case 1: id = table.row_count() + static_cast<int64_t>(draw % 1000); break;  // out of the table
      case 2: id = -2 - static_cast<int64_t>(draw % 1000); break;                  // negative, not DEAD
      case 3: if (h == 0 && special.negative_zero >= 0) id = special.negative_zero; else is_special = false; break;
      case 4: if (h == 0 && special.nan >= 0) id = special.nan; else is_special = false; break;
      default: is_special = false;
    }
    out.ids[static_cast<size_t>(s)] = id;
    if (is_special) out.special_slots.push_back(s);
  }
  return out;
}

std::vector<int64_t> slots_to_check(const LookupTestIds& ids, int sampled) {
  const int64_t slots = static_cast<int64_t>(ids.ids.size());
  std::vector<int64_t> checked = ids.special_slots;
  const int64_t step = std::max<int64_t>(1, slots / std::max(1, sampled));
  const size_t most = static_cast<size_t>(std::max(0, sampled)) + ids.special_slots.size();
  for (int64_t s = 0; s < slots && checked.size() < most; s += step) checked.push_back(s);
  std::sort(checked.begin(), checked.end());
  checked.erase(std::unique(checked.begin(), checked.end()), checked.end());
  return checked;
}

std::vector<std::string> check_against_cpu_reference(const TableSpec& table, uint64_t fill_seed,
                                                     const LookupTestIds& ids, std::span<const int64_t> slots,
                                                     std::span<const uint16_t> got, size_t max_mismatches) {
  std::vector<std::string> mismatches;
  std::vector<uint16_t> want(static_cast<size_t>(table.dim));
  for (int64_t s : slots) {
    const int64_t id = ids.ids[static_cast<size_t>(s)];
    kernels::filled_lookup_reference(table, fill_seed, std::span<const int64_t>(&id, 1), want);
    const std::span<const uint16_t> slot = got.subspan(static_cast<size_t>(s) * static_cast<size_t>(table.dim),
                                                       static_cast<size_t>(table.dim));
    for (int e = 0; e < table.dim; ++e) {
      if (bf16_same(want[static_cast<size_t>(e)], slot[static_cast<size_t>(e)])) continue;
      mismatches.push_back(fmt::format("slot {} (id {}) element {}: want 0x{:04x}, got 0x{:04x}", s, id, e,
                                       want[static_cast<size_t>(e)], slot[static_cast<size_t>(e)]));
      break;
    }
    if (mismatches.size() >= max_mismatches) break;
  }
  return mismatches;
}

std::string first_byte_difference(std::span<const uint16_t> a, std::span<const uint16_t> b, int dim) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i])
      return fmt::format("slot {} element {}: 0x{:04x} vs 0x{:04x}", i / static_cast<size_t>(dim),
                         i % static_cast<size_t>(dim), a[i], b[i]);
  return {};
}

}  // namespace engram::operator_checks
