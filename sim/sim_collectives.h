// Emulated collectives: the Collectives interface for ranks run by the
// deterministic Scheduler. Contributions meet in a shared rendezvous per
// operation. A member that dies turns every waiting rank's call into
// kUnavailable naming it; one that does not arrive within the collective's
// timeout (simulated time) turns it into kDeadlineExceeded naming it, and
// the group's communicator is aborted, as an engine's watchdog does: every
// later call on the group fails at once. Never a hang.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/backend/collectives.h"
#include "sim/scheduler.h"
#include "sim/sim_timeouts.h"

namespace engram::sim {

class CollectiveHub;

// A run of a member's bf16 reduce-scatter input: elements [first, first +
// values.size()) of its size() x count input. Elements outside every run are
// +0. The emulator's device reduce-scatter passes only what a rank wrote, so a
// mostly-zero input (the collective lookup's rows: each rank writes the rows
// it owns) costs what was written, not size() x count per rank.
struct Bf16Run {
  uint64_t first = 0;
  std::span<const uint16_t> values;
};

// The sparse form of reduce_scatter_sum_bf16, bitwise equal to it on the
// input the runs describe (the dense sum's ring order, runs of +0 folded as
// the dense sum folds them; docs/design.md section 4). Implemented by the emulator's collectives.
class SparseReduceScatter {
 public:
  virtual ~SparseReduceScatter() = default;
  virtual Status reduce_scatter_sum_bf16_runs(uint64_t count, std::span<const Bf16Run> runs,
                                              std::span<uint16_t> output) = 0;
  // The same runs reduced as DeviceCollectives::reduce_scatter_max_bytes
  // reduces its input: each byte the maximum over members, absent bytes 0.
  virtual Status reduce_scatter_max_bytes_runs(uint64_t count, std::span<const Bf16Run> runs,
                                               std::span<uint16_t> output) = 0;
};

// One group of world ranks (the world, or the result of a split).
struct SimGroup {
  int id = 0;
  std::vector<int> world_ranks;  // group rank -> world rank
  struct Operation {
    std::string kind;                                // "all_gather", ...
    std::vector<std::vector<std::byte>> contributions;
    std::vector<bool> arrived;
    int arrived_count = 0;
    int departed_count = 0;
    std::map<int, std::shared_ptr<SimGroup>> split_groups;       // color -> new group (split only)
    std::vector<int> split_index;  // group rank -> its rank in its new group (split only)
    std::shared_ptr<const GatheredBytes> shared_result;  // all_gather_shared: built once, handed to every member
    // Sparse reduce-scatter: each member's runs, cut at chunk bounds and
    // filed under the member whose chunk they fall in.
    struct ChunkRun {
      int member = 0;
      uint64_t offset = 0;  // within the chunk, in elements
      std::vector<uint16_t> values;
    };
    std::vector<std::vector<ChunkRun>> runs_by_chunk;
    // The size the first arrival passed, and whether a later one differed:
    // members compare sizes on arrival, so a member scans the others' only
    // when one differs (a scan per member is O(group) each).
    std::optional<uint64_t> first_size;
    bool sizes_differ = false;
  };
  std::map<uint64_t, Operation> operations;  // by per-rank sequence number
  // Set when a member timed out: what every later call on the group returns.
  std::optional<Status> aborted;
};

class CollectiveHub {
 public:
  CollectiveHub(Scheduler& scheduler, int world_size, SimTimeouts timeouts = {});

  std::unique_ptr<Collectives> world(int world_rank);
  // Ranks marked dead make every collective that waits on them fail.
  void mark_dead(int world_rank);
  bool is_dead(int world_rank) const { return dead_[static_cast<size_t>(world_rank)]; }
  int dead_count() const { return dead_count_; }
  Scheduler& scheduler() { return scheduler_; }
  const SimTimeouts& timeouts() const { return timeouts_; }
  std::shared_ptr<SimGroup> new_group(std::vector<int> world_ranks);
  uint64_t bytes_moved() const { return bytes_moved_; }
  void add_bytes_moved(uint64_t bytes) { bytes_moved_ += bytes; }

 private:
  Scheduler& scheduler_;
  SimTimeouts timeouts_;
  std::vector<bool> dead_;
  int dead_count_ = 0;
  std::shared_ptr<SimGroup> world_group_;
  int next_group_id_ = 0;
  uint64_t bytes_moved_ = 0;
};

class SimCollectives final : public Collectives, public SparseReduceScatter {
 public:
  SimCollectives(CollectiveHub& hub, std::shared_ptr<SimGroup> group, int group_rank);

  int rank() const override { return group_rank_; }
  int size() const override { return static_cast<int>(group_->world_ranks.size()); }
  int world_rank() const override { return group_->world_ranks[static_cast<size_t>(group_rank_)]; }

  Status all_gather(std::span<const std::byte> mine, std::span<std::byte> all) override;
  Result<std::shared_ptr<const GatheredBytes>> all_gather_shared(std::span<const std::byte> mine) override;
  Status reduce_scatter_sum_bf16(std::span<const uint16_t> input, std::span<uint16_t> output) override;
  Status reduce_scatter_sum_bf16_runs(uint64_t count, std::span<const Bf16Run> runs,
                                      std::span<uint16_t> output) override;
  Status reduce_scatter_max_bytes_runs(uint64_t count, std::span<const Bf16Run> runs,
                                       std::span<uint16_t> output) override;
  Status all_to_all(std::span<const std::byte> send, std::span<std::byte> receive) override;
  Status barrier() override;
  Result<std::unique_ptr<Collectives>> split(int color, int key) override;

 private:
  enum class RunsReduce : uint8_t { kSumBf16, kMaxBytes };
  Status reduce_scatter_runs(RunsReduce reduce, uint64_t count, std::span<const Bf16Run> runs,
                             std::span<uint16_t> output);
  // Deposits `mine` (and calls `deposit`, if any, on arrival), waits for
  // every member, then calls `finish` with all contributions in group-rank
  // order; the last to leave frees the slot.
  Status rendezvous(const char* kind, std::vector<std::byte> mine,
                    const std::function<Status(SimGroup::Operation&)>& finish,
                    const std::function<void(SimGroup::Operation&)>& deposit = nullptr);

  CollectiveHub& hub_;
  std::shared_ptr<SimGroup> group_;
  int group_rank_;
  uint64_t next_sequence_ = 0;
};

// Runs body(rank, collectives) on `rank_count` emulated ranks under a seeded
// scheduler; returns each rank's Status. For tests and tools that need only
// collectives (the full emulated world is sim/world.h).
struct RanksRun {
  std::vector<Status> statuses;
  uint64_t trace_hash = 0;
};
RanksRun run_ranks(int rank_count, uint64_t seed,
                   const std::function<Status(int rank, Collectives& world)>& body);

}  // namespace engram::sim
