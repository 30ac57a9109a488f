#include "sim/ledger.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
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

std::string LedgerEntry::describe() const {
  switch (kind) {
    case ResourceKind::kImportedHandle:
      return fmt::format("of rank {}'s allocation", detail.peer_rank);
    case ResourceKind::kExportFd:
    case ResourceKind::kReceivedFd:
      return fmt::format("fd {}", detail.address);
    case ResourceKind::kInFlightFd:
      return fmt::format("from rank {} to rank {}", detail.peer_rank, rank);
    case ResourceKind::kReservation:
      return fmt::format("at {:#x}", detail.address);
    case ResourceKind::kMapping:
      return fmt::format("{:#x} -> rank {}'s allocation", detail.address, detail.peer_rank);
    case ResourceKind::kHostRegistration:
      return fmt::format("host range at device {:#x}", detail.address);
    case ResourceKind::kAllocation:
    case ResourceKind::kShmSegment:
    case ResourceKind::kShmMapping:
      return detail.text;
  }
  return detail.text;
}

uint64_t Ledger::add(ResourceKind kind, int rank, uint64_t bytes, LedgerDetail detail) {
  uint32_t index = 0;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    ENGRAM_CHECK(slots_.size() < std::numeric_limits<uint32_t>::max());
    index = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& slot = slots_[index];
  ENGRAM_CHECK(!slot.live);
  ++slot.generation;
  slot.live = true;
  slot.kind = kind;
  slot.rank = rank;
  slot.serial = ++serial_;
  slot.bytes = bytes;
  slot.address = detail.address;
  slot.peer_rank = detail.peer_rank;
  slot.has_text = !detail.text.empty();
  if (slot.has_text) texts_[index] = std::move(detail.text);
  ++live_;
  return (static_cast<uint64_t>(slot.generation) << 32) | index;
}

LedgerEntry Ledger::entry_of(uint32_t index) const {
  const Slot& s = slots_[index];
  return LedgerEntry{s.kind, s.rank, (static_cast<uint64_t>(s.generation) << 32) | index, s.serial, s.bytes,
                     LedgerDetail{s.address, s.peer_rank, s.has_text ? texts_.at(index) : std::string()}};
}

const Ledger::Slot* Ledger::live_slot(ResourceKind kind, uint64_t id) const {
  const uint64_t index = id & 0xffffffffu;
  if (index >= slots_.size()) return nullptr;
  const Slot& slot = slots_[index];
  if (!slot.live || slot.generation != (id >> 32) || slot.kind != kind) return nullptr;
  return &slot;
}

void Ledger::remove(ResourceKind kind, uint64_t id) {
  const Slot* found = live_slot(kind, id);
  ENGRAM_CHECK_MSG(found != nullptr, "emulator bug: removing a ledger entry that is not live");
  Slot& slot = slots_[id & 0xffffffffu];
  slot.live = false;
  if (slot.has_text) texts_.erase(static_cast<uint32_t>(id & 0xffffffffu));
  slot.has_text = false;
  free_.push_back(static_cast<uint32_t>(id & 0xffffffffu));
  --live_;
}

bool Ledger::contains(ResourceKind kind, uint64_t id) const { return live_slot(kind, id) != nullptr; }

std::vector<LedgerEntry> Ledger::live_for_rank(int rank) const {
  std::vector<LedgerEntry> out;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].live && slots_[i].rank == rank) out.push_back(entry_of(static_cast<uint32_t>(i)));
  std::sort(out.begin(), out.end(), [](const LedgerEntry& a, const LedgerEntry& b) {
    return std::tie(a.kind, a.serial) < std::tie(b.kind, b.serial);
  });
  return out;
}

std::vector<LedgerEntry> Ledger::leaks() const {
  std::vector<LedgerEntry> out;
  out.reserve(live_);
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].live) out.push_back(entry_of(static_cast<uint32_t>(i)));
  std::sort(out.begin(), out.end(), [](const LedgerEntry& a, const LedgerEntry& b) {
    return std::tie(a.rank, a.kind, a.serial) < std::tie(b.rank, b.kind, b.serial);
  });
  return out;
}

std::string Ledger::format(const std::vector<LedgerEntry>& entries, size_t max_lines) {
  if (entries.empty()) return "no live resources";
  std::string out = fmt::format("{} live resource(s):", entries.size());
  for (size_t i = 0; i < entries.size() && i < max_lines; ++i) {
    const auto& e = entries[i];
    out += fmt::format("\n  rank {} {} #{} ({} bytes) {}", e.rank, resource_kind_name(e.kind), e.serial, e.bytes,
                       e.describe());
  }
  if (entries.size() > max_lines) out += fmt::format("\n  ... and {} more", entries.size() - max_lines);
  return out;
}

}  // namespace engram::sim
