// The emulator's ledger: every live resource a rank holds (allocations,
// export fds, imported handles, reservations, mappings, received fds, fds in
// flight, shm segments and shm mappings), so a test or the swarm can ask
// "what did this run leave behind?" after every rank returned.
#pragma once

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <string>
#include <utility>
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

// What a leak report says about an entry, kept as values and worded only
// when a report is made: at scale the emulator adds millions of entries and
// reports none. Which fields mean what depends on the kind (ledger.cc words it).
struct LedgerDetail {
  uint64_t address = 0;  // device address (reservation, mapping, registration) or fd number
  int peer_rank = -1;    // the allocation's creator (import, mapping) or an fd's sender
  std::string text;      // free text where values do not say it: "gpu 2 of host-a", "/dev/shm/engram-x"

  static LedgerDetail at(uint64_t address) { return {address, -1, {}}; }
  static LedgerDetail of_rank(int peer_rank) { return {0, peer_rank, {}}; }
  static LedgerDetail at_of_rank(uint64_t address, int peer_rank) { return {address, peer_rank, {}}; }
  static LedgerDetail note(std::string text) { return {0, -1, std::move(text)}; }
};

struct LedgerEntry {
  ResourceKind kind = ResourceKind::kAllocation;
  int rank = -1;        // holder
  uint64_t id = 0;      // what add() returned; unique while the entry lives
  uint64_t serial = 0;  // the how-manieth add of the run: reports list in this order
  uint64_t bytes = 0;
  LedgerDetail detail;
  std::string describe() const;  // "fd 7", "0x2000 -> rank 3's allocation", ...
};

// Entries live in slots of one vector (a freed slot is reused), and an id
// names its slot and the slot's generation: add, remove and contains are an
// index, with no hashing or allocation per entry, since at scale the
// emulator makes and drops millions of them.
class Ledger {
 public:
  // Returns the entry's id, which remove() takes.
  uint64_t add(ResourceKind kind, int rank, uint64_t bytes, LedgerDetail detail);
  // ENGRAM_CHECKs that the entry lives and is of `kind`: removing twice is an emulator bug.
  void remove(ResourceKind kind, uint64_t id);
  bool contains(ResourceKind kind, uint64_t id) const;

  std::vector<LedgerEntry> live_for_rank(int rank) const;
  size_t live_count() const { return live_; }
  // Everything still live, ordered by (rank, kind, serial) for stable reports.
  std::vector<LedgerEntry> leaks() const;
  static std::string format(const std::vector<LedgerEntry>& entries, size_t max_lines = 20);

 private:
  // An entry's values without its text (40 bytes): at scale the ledger is
  // the emulator's largest table, and few kinds carry text.
  struct Slot {
    uint64_t serial = 0;
    uint64_t bytes = 0;
    uint64_t address = 0;
    int rank = -1;
    int peer_rank = -1;
    uint32_t generation = 0;
    ResourceKind kind = ResourceKind::kAllocation;
    bool live = false;
    bool has_text = false;  // texts_ holds its text: removing the rest touches no hash table
  };
  static_assert(sizeof(Slot) <= 40, "a ledger slot is the emulator's most numerous record");
  const Slot* live_slot(ResourceKind kind, uint64_t id) const;
  LedgerEntry entry_of(uint32_t index) const;

  std::deque<Slot> slots_;  // grows without moving (or re-touching) the live entries
  std::unordered_map<uint32_t, std::string> texts_;  // by slot index, for entries with text
  std::vector<uint32_t> free_;  // indices of dead slots
  size_t live_ = 0;
  uint64_t serial_ = 0;
};

}  // namespace engram::sim
