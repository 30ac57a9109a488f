// The emulator's ledger: every live resource a rank holds (allocations,
// export fds, imported handles, reservations, mappings, received fds, fds in
// flight, shm segments and shm mappings), so a test or the swarm can ask
// "what did this run leave behind?" after every rank returned.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace engram::sim {

enum class ResourceKind : uint8_t {
  kAllocation,      // cuMemCreate
  kImportedHandle,  // cuMemImportFromShareableHandle
  kExportFd,        // fd from cuMemExportToShareableHandle
  kReceivedFd,      // fd received over the fd channel
  kInFlightFd,      // sent, not yet received (held by the socket)
  kReservation,     // cuMemAddressReserve
  kMapping,         // cuMemMap
  kShmSegment,      // /dev/shm file: survives its creator, as on tmpfs
  kShmMapping,      // mmap of a segment
  kHostRegistration,  // cudaHostRegister of host memory the device reads
};
const char* resource_kind_name(ResourceKind kind);

struct LedgerEntry {
  ResourceKind kind = ResourceKind::kAllocation;
  int rank = -1;        // holder
  uint64_t id = 0;      // unique within its kind
  uint64_t bytes = 0;
  std::string detail;   // "gpu 2 of host-a", "/dev/shm/engram-x", ...
};

class Ledger {
 public:
  void add(ResourceKind kind, int rank, uint64_t id, uint64_t bytes, std::string detail);
  // ENGRAM_CHECKs that the entry exists: removing twice is an emulator bug.
  void remove(ResourceKind kind, uint64_t id);
  bool contains(ResourceKind kind, uint64_t id) const;

  std::vector<LedgerEntry> live_for_rank(int rank) const;
  size_t live_count() const { return entries_.size(); }
  // Everything still live, ordered by (rank, kind, id) for stable reports.
  std::vector<LedgerEntry> leaks() const;
  static std::string format(const std::vector<LedgerEntry>& entries, size_t max_lines = 20);

 private:
  static uint64_t key(ResourceKind kind, uint64_t id) {
    return (static_cast<uint64_t>(kind) << 56) ^ id;
  }
  std::unordered_map<uint64_t, LedgerEntry> entries_;
};

}  // namespace engram::sim
