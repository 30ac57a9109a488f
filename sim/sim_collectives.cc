#include "sim/sim_collectives.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>

namespace engram::sim {

CollectiveHub::CollectiveHub(Scheduler& scheduler, int world_size)
    : scheduler_(scheduler), dead_(static_cast<size_t>(world_size), false) {
  ENGRAM_CHECK(world_size >= 1);
  std::vector<int> ranks(static_cast<size_t>(world_size));
  std::iota(ranks.begin(), ranks.end(), 0);
  world_group_ = new_group(std::move(ranks));
}

std::shared_ptr<SimGroup> CollectiveHub::new_group(std::vector<int> world_ranks) {
  auto group = std::make_shared<SimGroup>();
  group->id = next_group_id_++;
  group->world_ranks = std::move(world_ranks);
  return group;
}

std::unique_ptr<Collectives> CollectiveHub::world(int world_rank) {
  ENGRAM_CHECK(world_rank >= 0 && world_rank < static_cast<int>(dead_.size()));
  return std::make_unique<SimCollectives>(*this, world_group_, world_rank);
}

void CollectiveHub::mark_dead(int world_rank) {
  if (!dead_[static_cast<size_t>(world_rank)]) ++dead_count_;
  dead_[static_cast<size_t>(world_rank)] = true;
  scheduler_.record(fmt::format("dead {}", world_rank));
  scheduler_.notify_all();
}

SimCollectives::SimCollectives(CollectiveHub& hub, std::shared_ptr<SimGroup> group, int group_rank)
    : hub_(hub), group_(std::move(group)), group_rank_(group_rank) {
  ENGRAM_CHECK(group_rank_ >= 0 && group_rank_ < static_cast<int>(group_->world_ranks.size()));
}

Status SimCollectives::rendezvous(const char* kind, std::vector<std::byte> mine,
                                  const std::function<Status(SimGroup::Operation&)>& finish) {
  const uint64_t sequence = next_sequence_++;
  const int n = size();
  SimGroup::Operation& op = group_->operations[sequence];
  if (op.contributions.empty()) {
    op.kind = kind;
    op.contributions.resize(static_cast<size_t>(n));
    op.arrived.assign(static_cast<size_t>(n), false);
  }
  if (op.kind != kind) {
    return Status(ErrorCode::kInternal,
                  fmt::format("collective mismatch in group {}: this rank called {} as call #{}, a peer called {}",
                              group_->id, kind, sequence, op.kind),
                  {world_rank(), -1, kind});
  }
  hub_.add_bytes_moved(mine.size());
  op.contributions[static_cast<size_t>(group_rank_)] = std::move(mine);
  op.arrived[static_cast<size_t>(group_rank_)] = true;
  ++op.arrived_count;
  hub_.scheduler().record(fmt::format("{} g{} #{} arrive {}", kind, group_->id, sequence, world_rank()));
  if (op.arrived_count == n) hub_.scheduler().notify_all();

  int missing_peer = -1;
  auto complete_or_peer_gone = [&] {
    if (op.arrived_count == n) return true;
    // Re-checked at every wake-up: scan members only once somebody has died.
    if (hub_.dead_count() == 0) return false;
    for (int i = 0; i < n; ++i) {
      int w = group_->world_ranks[static_cast<size_t>(i)];
      if (!op.arrived[static_cast<size_t>(i)] && hub_.is_dead(w)) {
        missing_peer = w;
        return true;
      }
    }
    return false;
  };
  bool woke = hub_.scheduler().wait_until(complete_or_peer_gone);
  Status status;
  if (op.arrived_count != n) {
    if (missing_peer < 0) {
      for (int i = 0; i < n; ++i)
        if (!op.arrived[static_cast<size_t>(i)]) { missing_peer = group_->world_ranks[static_cast<size_t>(i)]; break; }
    }
    status = Status(ErrorCode::kUnavailable,
                    fmt::format("{} in group {} cannot complete: rank {} {}", kind, group_->id, missing_peer,
                                woke ? "died" : "never arrived (stuck or gone)"),
                    {world_rank(), missing_peer, kind});
  } else {
    status = finish(op);
  }
  // The last member to leave frees the slot; a failed op is freed by whoever
  // leaves it last too, so no state outlives the call.
  ++op.departed_count;
  if (op.departed_count == op.arrived_count) group_->operations.erase(sequence);
  // No yield here: every rank parks at its next blocking point, where the
  // seed picks who runs next, so interleavings still differ by seed; a yield
  // per rank per collective would double the hand-offs for nothing.
  return status;
}

Status SimCollectives::all_gather(std::span<const std::byte> mine, std::span<std::byte> all) {
  if (all.size() != mine.size() * static_cast<size_t>(size()))
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("all_gather: output holds {} bytes, expected {} x {}", all.size(), size(), mine.size()),
                  {world_rank(), -1, "all_gather"});
  return rendezvous("all_gather", {mine.begin(), mine.end()}, [&](SimGroup::Operation& op) -> Status {
    for (int i = 0; i < size(); ++i) {
      const auto& c = op.contributions[static_cast<size_t>(i)];
      if (c.size() != mine.size())
        return Status(ErrorCode::kInvalidArgument,
                      fmt::format("all_gather: rank {} sent {} bytes, this rank {}",
                                  group_->world_ranks[static_cast<size_t>(i)], c.size(), mine.size()),
                      {world_rank(), group_->world_ranks[static_cast<size_t>(i)], "all_gather"});
      if (!c.empty()) std::memcpy(all.data() + static_cast<size_t>(i) * mine.size(), c.data(), c.size());
    }
    return Status::ok();
  });
}

Status SimCollectives::reduce_scatter_sum_bf16(std::span<const uint16_t> input, std::span<uint16_t> output) {
  if (input.size() != output.size() * static_cast<size_t>(size()))
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("reduce_scatter: input holds {} values, expected {} x {}", input.size(), size(),
                              output.size()),
                  {world_rank(), -1, "reduce_scatter"});
  auto bytes = std::as_bytes(input);
  return rendezvous("reduce_scatter", {bytes.begin(), bytes.end()}, [&](SimGroup::Operation& op) -> Status {
    std::vector<std::span<const uint16_t>> inputs;
    for (const auto& c : op.contributions) {
      if (c.size() != bytes.size())
        return Status(ErrorCode::kInvalidArgument, "reduce_scatter: ranks passed different sizes",
                      {world_rank(), -1, "reduce_scatter"});
      inputs.emplace_back(reinterpret_cast<const uint16_t*>(c.data()), c.size() / sizeof(uint16_t));
    }
    reduce_scatter_sum_bf16_reference(inputs, rank(), output);
    return Status::ok();
  });
}

Status SimCollectives::all_to_all(std::span<const std::byte> send, std::span<std::byte> receive) {
  const size_t n = static_cast<size_t>(size());
  if (send.size() != receive.size() || send.size() % n != 0)
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("all_to_all: send {} and receive {} bytes must match and divide by {}", send.size(),
                              receive.size(), n),
                  {world_rank(), -1, "all_to_all"});
  return rendezvous("all_to_all", {send.begin(), send.end()}, [&](SimGroup::Operation& op) -> Status {
    const size_t chunk = send.size() / n;
    for (size_t j = 0; j < n; ++j) {
      const auto& c = op.contributions[j];
      if (c.size() != send.size())
        return Status(ErrorCode::kInvalidArgument, "all_to_all: ranks passed different sizes",
                      {world_rank(), group_->world_ranks[j], "all_to_all"});
      if (chunk) std::memcpy(receive.data() + j * chunk, c.data() + static_cast<size_t>(rank()) * chunk, chunk);
    }
    return Status::ok();
  });
}

Status SimCollectives::barrier() {
  return rendezvous("barrier", {}, [](SimGroup::Operation&) { return Status::ok(); });
}

Result<std::unique_ptr<Collectives>> SimCollectives::split(int color, int key) {
  struct Entry { int color; int key; };
  Entry mine{color, key};
  auto bytes = std::as_bytes(std::span<const Entry>(&mine, 1));
  std::unique_ptr<Collectives> result;
  Status status = rendezvous("split", {bytes.begin(), bytes.end()}, [&](SimGroup::Operation& op) -> Status {
    // Every member computes the same membership; the first to get here builds
    // the group objects so all members share them.
    if (op.split_groups.empty()) {
      std::map<int, std::vector<std::pair<std::pair<int, int>, int>>> by_color;  // (key, group rank) -> world
      for (int i = 0; i < size(); ++i) {
        Entry e;
        std::memcpy(&e, op.contributions[static_cast<size_t>(i)].data(), sizeof(Entry));
        by_color[e.color].push_back({{e.key, i}, group_->world_ranks[static_cast<size_t>(i)]});
      }
      for (auto& [c, members] : by_color) {
        std::sort(members.begin(), members.end());
        std::vector<int> world_ranks;
        for (auto& m : members) world_ranks.push_back(m.second);
        op.split_groups[c] = hub_.new_group(std::move(world_ranks));
      }
    }
    auto group = op.split_groups.at(color);
    const auto& w = group->world_ranks;
    int my_index = static_cast<int>(std::find(w.begin(), w.end(), world_rank()) - w.begin());
    ENGRAM_CHECK(my_index < static_cast<int>(w.size()));
    result = std::make_unique<SimCollectives>(hub_, group, my_index);
    return Status::ok();
  });
  if (!status.is_ok()) return status;
  return result;
}

RanksRun run_ranks(int rank_count, uint64_t seed, const std::function<Status(int, Collectives&)>& body) {
  Scheduler scheduler(seed);
  CollectiveHub hub(scheduler, rank_count);
  RanksRun run;
  run.statuses.resize(static_cast<size_t>(rank_count));
  scheduler.run(rank_count, [&](int rank) {
    auto world = hub.world(rank);
    run.statuses[static_cast<size_t>(rank)] = body(rank, *world);
  });
  run.trace_hash = scheduler.trace_hash();
  return run;
}

}  // namespace engram::sim
