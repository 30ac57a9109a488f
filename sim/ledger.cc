#include "sim/ledger.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "core/base/status.h"

namespace engram::sim {

const char* resource_kind_name(ResourceKind kind) {
  switch (kind) {
    case ResourceKind::kAllocation: return "allocation";
    case ResourceKind::kImportedHandle: return "imported_handle";
    case ResourceKind::kExportFd: return "export_fd";
    case ResourceKind::kReceivedFd: return "received_fd";
    case ResourceKind::kInFlightFd: return "in_flight_fd";
    case ResourceKind::kReservation: return "reservation";
    case ResourceKind::kMapping: return "mapping";
    case ResourceKind::kShmSegment: return "shm_segment";
    case ResourceKind::kShmMapping: return "shm_mapping";
    case ResourceKind::kHostRegistration: return "host_registration";
  }
  return "unknown";
}

void Ledger::add(ResourceKind kind, int rank, uint64_t id, uint64_t bytes, std::string detail) {
  ENGRAM_CHECK(id < (1ull << 56));  // the kind lives in the top byte of the key
  auto [it, inserted] = entries_.try_emplace(key(kind, id), LedgerEntry{kind, rank, id, bytes, std::move(detail)});
  ENGRAM_CHECK(inserted);
}

void Ledger::remove(ResourceKind kind, uint64_t id) {
  size_t erased = entries_.erase(key(kind, id));
  ENGRAM_CHECK(erased == 1);
}

bool Ledger::contains(ResourceKind kind, uint64_t id) const { return entries_.count(key(kind, id)) != 0; }

std::vector<LedgerEntry> Ledger::live_for_rank(int rank) const {
  std::vector<LedgerEntry> out;
  for (const auto& [k, e] : entries_)
    if (e.rank == rank) out.push_back(e);
  std::sort(out.begin(), out.end(), [](const LedgerEntry& a, const LedgerEntry& b) {
    return std::tie(a.kind, a.id) < std::tie(b.kind, b.id);
  });
  return out;
}

std::vector<LedgerEntry> Ledger::leaks() const {
  std::vector<LedgerEntry> out;
  out.reserve(entries_.size());
  for (const auto& [k, e] : entries_) out.push_back(e);
  std::sort(out.begin(), out.end(), [](const LedgerEntry& a, const LedgerEntry& b) {
    return std::tie(a.rank, a.kind, a.id) < std::tie(b.rank, b.kind, b.id);
  });
  return out;
}

std::string Ledger::format(const std::vector<LedgerEntry>& entries, size_t max_lines) {
  if (entries.empty()) return "no live resources";
  std::string out = fmt::format("{} live resource(s):", entries.size());
  for (size_t i = 0; i < entries.size() && i < max_lines; ++i) {
    const auto& e = entries[i];
    out += fmt::format("\n  rank {} {} #{} ({} bytes) {}", e.rank, resource_kind_name(e.kind), e.id, e.bytes, e.detail);
  }
  if (entries.size() > max_lines) out += fmt::format("\n  ... and {} more", entries.size() - max_lines);
  return out;
}

}  // namespace engram::sim
