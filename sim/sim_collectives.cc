#include "sim/sim_collectives.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/base/bf16.h"

namespace engram::sim {

CollectiveHub::CollectiveHub(Scheduler& scheduler, int world_size, SimTimeouts timeouts)
    : scheduler_(scheduler), timeouts_(timeouts), dead_(static_cast<size_t>(world_size), false) {
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
  ENGRAM_TRACE(scheduler_, "dead {}", world_rank);
  scheduler_.notify_all();
}

SimCollectives::SimCollectives(CollectiveHub& hub, std::shared_ptr<SimGroup> group, int group_rank)
    : hub_(hub), group_(std::move(group)), group_rank_(group_rank) {
  ENGRAM_CHECK(group_rank_ >= 0 && group_rank_ < static_cast<int>(group_->world_ranks.size()));
}

Status SimCollectives::rendezvous(const char* kind, std::vector<std::byte> mine,
                                  const std::function<Status(SimGroup::Operation&)>& finish,
                                  const std::function<void(SimGroup::Operation&)>& deposit) {
  Scheduler& scheduler = hub_.scheduler();
  if (group_->aborted) {
    const Status& why = *group_->aborted;
    return Status(why.code(), fmt::format("{}: {}", kind, why.message()), {world_rank(), why.context().peer, kind});
  }
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
  if (deposit) deposit(op);
  op.arrived[static_cast<size_t>(group_rank_)] = true;
  ++op.arrived_count;
  ENGRAM_TRACE(scheduler, "{} g{} #{} arrive {}", kind, group_->id, sequence, world_rank());
  const Scheduler::WaitKey complete_key =
      Scheduler::wait_key(Scheduler::KeySpace::kCollective, static_cast<uint64_t>(group_->id), sequence);
  if (op.arrived_count == n) scheduler.notify(complete_key);

  int missing_peer = -1;
  auto complete_or_peer_gone = [&] {
    if (op.arrived_count == n || group_->aborted) return true;
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
  const bool is_split = std::string_view(kind) == "split";
  const SimTimeUs timeout_us = is_split ? hub_.timeouts().split_us : hub_.timeouts().collective_us;
  // A death or an abort wakes every waiter (notify_all); the last arrival, this op's waiters.
  const Scheduler::Wake wake =
      scheduler.wait_until(complete_or_peer_gone, scheduler.now_us() + timeout_us, {complete_key});
  Status status;
  if (op.arrived_count != n) {
    auto first_missing = [&] {
      for (int i = 0; i < n; ++i)
        if (!op.arrived[static_cast<size_t>(i)]) return group_->world_ranks[static_cast<size_t>(i)];
      return -1;
    };
    if (missing_peer >= 0) {
      status = Status(ErrorCode::kUnavailable,
                      fmt::format("{} in group {} cannot complete: rank {} died", kind, group_->id, missing_peer),
                      {world_rank(), missing_peer, kind});
    } else if (group_->aborted) {
      const Status& why = *group_->aborted;
      status = Status(why.code(), why.message(), {world_rank(), why.context().peer, kind});
    } else if (wake == Scheduler::Wake::kTimedOut) {
      missing_peer = first_missing();
      status = Status(ErrorCode::kDeadlineExceeded,
                      fmt::format("{} in group {} timed out: rank {} did not arrive within {:.3g} s of simulated "
                                  "time ({} of {} ranks arrived); it is hung, dead or slower than the timeout, so "
                                  "the group's communicator was aborted",
                                  kind, group_->id, missing_peer, static_cast<double>(timeout_us) / 1e6,
                                  op.arrived_count, n),
                      {world_rank(), missing_peer, kind});
      // As an engine's watchdog does: the communicator is torn down, and
      // every member waiting on it, now or later, fails with this.
      group_->aborted = status;
      ENGRAM_TRACE(scheduler, "abort g{} at {} by {}", group_->id, scheduler.now_us(), world_rank());
      scheduler.notify_all();
    } else {
      missing_peer = first_missing();
      status = Status(ErrorCode::kUnavailable,
                      fmt::format("{} in group {} cannot complete: rank {} never arrived and no rank can make "
                                  "progress (a wait without a deadline)",
                                  kind, group_->id, missing_peer),
                      {world_rank(), missing_peer, kind});
    }
  } else {
    status = finish(op);
  }
  scheduler.mark("leave");
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

Result<std::shared_ptr<const GatheredBytes>> SimCollectives::all_gather_shared(std::span<const std::byte> mine) {
  std::shared_ptr<const GatheredBytes> result;
  Status status = rendezvous("all_gather", {mine.begin(), mine.end()}, [&](SimGroup::Operation& op) -> Status {
    // The first member to leave assembles the result; the others share it.
    if (!op.shared_result) {
      auto all = std::make_shared<GatheredBytes>();
      all->bytes.reserve(mine.size() * static_cast<size_t>(size()));
      for (int i = 0; i < size(); ++i) {
        const auto& c = op.contributions[static_cast<size_t>(i)];
        if (c.size() != mine.size())
          return Status(ErrorCode::kInvalidArgument,
                        fmt::format("all_gather: rank {} sent {} bytes, this rank {}",
                                    group_->world_ranks[static_cast<size_t>(i)], c.size(), mine.size()),
                        {world_rank(), group_->world_ranks[static_cast<size_t>(i)], "all_gather"});
        all->bytes.insert(all->bytes.end(), c.begin(), c.end());
      }
      op.shared_result = std::move(all);
      // The contributions are in the result now.
      for (auto& c : op.contributions) std::vector<std::byte>().swap(c);
    }
    result = op.shared_result;
    return Status::ok();
  });
  if (!status.is_ok()) return status;
  return result;
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

namespace {

uint16_t add_bf16(uint16_t a, uint16_t b) { return float_to_bf16(bf16_to_float(a) + bf16_to_float(b)); }

}  // namespace

Status SimCollectives::reduce_scatter_sum_bf16_runs(uint64_t count, std::span<const Bf16Run> runs,
                                                    std::span<uint16_t> output) {
  return reduce_scatter_runs(RunsReduce::kSumBf16, count, runs, output);
}

Status SimCollectives::reduce_scatter_max_bytes_runs(uint64_t count, std::span<const Bf16Run> runs,
                                                     std::span<uint16_t> output) {
  return reduce_scatter_runs(RunsReduce::kMaxBytes, count, runs, output);
}

Status SimCollectives::reduce_scatter_runs(RunsReduce reduce, uint64_t count, std::span<const Bf16Run> runs,
                                           std::span<uint16_t> output) {
  const uint64_t n = static_cast<uint64_t>(size());
  if (output.size() != count)
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("reduce_scatter: output holds {} values, expected {}", output.size(), count),
                  {world_rank(), -1, "reduce_scatter"});
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // [first, end) of each run, to find overlaps
  for (const Bf16Run& run : runs) {
    if (run.first + run.values.size() > count * n)
      return Status(ErrorCode::kInvalidArgument,
                    fmt::format("reduce_scatter: a run [{}, {}) reaches past the {} x {} input", run.first,
                                run.first + run.values.size(), n, count),
                    {world_rank(), -1, "reduce_scatter"});
    spans.emplace_back(run.first, run.first + run.values.size());
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second)
      return Status(ErrorCode::kInvalidArgument,
                    fmt::format("reduce_scatter: runs [{}, {}) and [{}, {}) overlap; each element is given once",
                                spans[i - 1].first, spans[i - 1].second, spans[i].first, spans[i].second),
                    {world_rank(), -1, "reduce_scatter"});
  // The count travels as the contribution, so members that disagree are caught.
  const auto count_bytes = std::as_bytes(std::span(&count, 1));
  auto deposit = [&](SimGroup::Operation& op) {
    if (!op.first_size) op.first_size = count;
    op.sizes_differ |= *op.first_size != count;
    if (op.runs_by_chunk.empty()) op.runs_by_chunk.resize(n);
    for (const Bf16Run& run : runs) {
      uint64_t at = run.first;
      size_t taken = 0;
      while (taken < run.values.size()) {
        const uint64_t chunk = at / count;
        const uint64_t within = at % count;
        const size_t length = static_cast<size_t>(std::min<uint64_t>(count - within, run.values.size() - taken));
        auto values = run.values.subspan(taken, length);
        op.runs_by_chunk[chunk].push_back({rank(), within, {values.begin(), values.end()}});
        at += length;
        taken += length;
      }
    }
  };
  return rendezvous(
      "reduce_scatter", {count_bytes.begin(), count_bytes.end()},
      [&](SimGroup::Operation& op) -> Status {
        for (size_t i = 0; op.sizes_differ && i < op.contributions.size(); ++i) {
          uint64_t theirs = 0;
          std::memcpy(&theirs, op.contributions[i].data(), sizeof theirs);
          if (theirs != count)
            return Status(ErrorCode::kInvalidArgument, "reduce_scatter: ranks passed different sizes",
                          {world_rank(), group_->world_ranks[i], "reduce_scatter"});
        }
        const int me = rank();
        if (reduce == RunsReduce::kMaxBytes) {
          // Byte-wise max (NCCL's ncclMax over ncclUint8), absent bytes 0: order-free.
          std::fill(output.begin(), output.end(), uint16_t{0});
          for (const auto& run : op.runs_by_chunk[static_cast<size_t>(me)])
            for (size_t k = 0; k < run.values.size(); ++k) {
              uint16_t& out = output[static_cast<size_t>(run.offset) + k];
              const uint16_t v = run.values[k];
              out = static_cast<uint16_t>(std::max(out & 0xffu, v & 0xffu) | std::max(out & 0xff00u, v & 0xff00u));
            }
          return Status::ok();
        }
        // The dense sum folds members in ring order from this rank's
        // successor: acc = first; acc = bf16(acc + next)... An absent (+0)
        // member maps acc to bf16(acc + 0) (-0 becomes +0, NaN canonical),
        // which is idempotent, so a run of absent members is one such step.
        auto ring_position = [&](int member) { return (member - me - 1 + static_cast<int>(n)) % static_cast<int>(n); };
        std::vector<const SimGroup::Operation::ChunkRun*> mine;
        for (const auto& run : op.runs_by_chunk[static_cast<size_t>(me)]) mine.push_back(&run);
        std::stable_sort(mine.begin(), mine.end(), [&](const auto* a, const auto* b) {
          return ring_position(a->member) < ring_position(b->member);
        });
        std::vector<uint16_t> acc(count, 0);
        std::vector<int> last(count, -1);  // ring position last added; -1: none yet
        for (const auto* run : mine) {
          const int position = ring_position(run->member);
          for (size_t k = 0; k < run->values.size(); ++k) {
            const size_t e = static_cast<size_t>(run->offset) + k;
            ENGRAM_CHECK(last[e] < position);  // one run per member and element
            if (last[e] == -1) {
              acc[e] = position == 0 ? run->values[k] : add_bf16(0, run->values[k]);
            } else {
              if (position - last[e] > 1) acc[e] = add_bf16(acc[e], 0);
              acc[e] = add_bf16(acc[e], run->values[k]);
            }
            last[e] = position;
          }
        }
        for (size_t e = 0; e < count; ++e) {
          if (last[e] == -1) output[e] = 0;
          else output[e] = last[e] < static_cast<int>(n) - 1 ? add_bf16(acc[e], 0) : acc[e];
        }
        return Status::ok();
      },
      deposit);
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
        op.split_index.resize(static_cast<size_t>(size()));
        for (auto& m : members) {
          op.split_index[static_cast<size_t>(m.first.second)] = static_cast<int>(world_ranks.size());
          world_ranks.push_back(m.second);
        }
        op.split_groups[c] = hub_.new_group(std::move(world_ranks));
      }
    }
    auto group = op.split_groups.at(color);
    const int my_index = op.split_index[static_cast<size_t>(group_rank_)];
    ENGRAM_CHECK(group->world_ranks[static_cast<size_t>(my_index)] == world_rank());
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
