// The cases the CP halo tests run on every backend (the emulator's host and
// device collectives, TCP between processes): every split of chunks into cp
// shards, and random cuts, each rank checking its shard's ids against the
// whole sequence hashed at once. Every member runs the same cases in the
// same order (each is one collective exchange).
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <span>
#include <vector>

#include "core/base/splitmix64.h"
#include "core/lookup/cp_halo.h"
#include "core/model/hashing.h"
#include "core/model/table_spec.h"

namespace engram::cp_cases {

using Exchange = std::function<Result<CpHalo>(int halo_length, std::span<const int64_t> shard)>;

// DeepSeek-V4.1-Flash's two tables (layers 1 and 14, n-grams up to 4).
inline const std::vector<TableHasher>& v41_hashers() {
  static const std::vector<TableHasher> hashers = [] {
    std::vector<TableHasher> out;
    auto spec = model_preset("deepseek-v4.1-flash");
    ENGRAM_CHECK_MSG(spec.is_ok(), spec.status().to_string().c_str());
    for (int t = 0; t < static_cast<int>(spec->tables.size()); ++t) {
      auto h = TableHasher::create(*spec, t);
      ENGRAM_CHECK_MSG(h.is_ok(), h.status().to_string().c_str());
      out.push_back(*h);
    }
    return out;
  }();
  return hashers;
}

// Token i of a drawn sequence: about one in six DEAD (an image token).
inline std::vector<int64_t> drawn_tokens(uint64_t seed, size_t count, int64_t vocab) {
  std::vector<int64_t> out(count);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t draw = splitmix64_at(seed, i);
    out[i] = draw % 6 == 0 ? kDeadId : static_cast<int64_t>((draw >> 8) % static_cast<uint64_t>(vocab));
  }
  return out;
}

// One exchange and this rank's checks: its shard (chunk[cuts[k], cuts[k+1]))
// hashed after the halo equals the whole (prefix + chunk) hashed at once, its
// offset is cuts[k], and the lookback after the chunk leaves the history the
// whole sequence leaves.
inline Status check_cut(const Exchange& exchange, int cp_rank, std::span<const TableHasher> hashers,
                        const std::vector<int64_t>& prefix, const std::vector<int64_t>& chunk,
                        const std::vector<size_t>& cuts) {
  const auto k = static_cast<size_t>(cp_rank);
  const std::vector<int64_t> shard(chunk.begin() + static_cast<std::ptrdiff_t>(cuts[k]),
                                   chunk.begin() + static_cast<std::ptrdiff_t>(cuts[k + 1]));
  auto where = [&] {
    return fmt::format("cp rank {}, prefix [{}], chunk [{}], cuts [{}]", cp_rank, fmt::join(prefix, " "),
                       fmt::join(chunk, " "), fmt::join(cuts, " "));
  };
  ENGRAM_ASSIGN_OR_RETURN(CpHalo halo, exchange(cp_halo_length(hashers), shard));
  if (halo.shard_offset(cp_rank) != static_cast<int64_t>(cuts[k]) ||
      halo.chunk_tokens() != static_cast<int64_t>(chunk.size()))
    return internal_error(fmt::format("{}: offset {} of {} tokens", where(), halo.shard_offset(cp_rank),
                                      halo.chunk_tokens()));
  std::vector<int64_t> whole_sequence = prefix;
  whole_sequence.insert(whole_sequence.end(), chunk.begin(), chunk.end());
  for (size_t t = 0; t < hashers.size(); ++t) {
    const TableHasher& h = hashers[t];
    const size_t heads = static_cast<size_t>(h.head_count());
    std::vector<int64_t> whole(whole_sequence.size() * heads), got(shard.size() * heads);
    ENGRAM_RETURN_IF_ERROR(h.hash(whole_sequence, {}, whole));
    ENGRAM_RETURN_IF_ERROR(hash_cp_shard(halo, cp_rank, h, prefix, shard, got));
    const size_t first = (prefix.size() + cuts[k]) * heads;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != whole[first + i])
        return internal_error(fmt::format("{}: table {} token {} of the shard, head {}: id {}, the whole sequence's {}",
                                          where(), t, i / heads, i % heads, got[i], whole[first + i]));
    std::vector<int64_t> after = h.empty_history(), want = h.empty_history();
    h.advance(after, halo.lookback_after_chunk(prefix));
    h.advance(want, whole_sequence);
    if (after != want)
      return internal_error(fmt::format("{}: table {}: history after the chunk [{}], the whole sequence's [{}]",
                                        where(), t, fmt::join(after, " "), fmt::join(want, " ")));
  }
  return Status::ok();
}

// Every way to cut chunks of 0..longest tokens into cp shards (C(L + cp - 1,
// cp - 1) cuts of length L), after no prefix, a short one and one with a DEAD.
inline Status check_every_split(const Exchange& exchange, int cp_rank, int cp, int longest,
                                std::span<const TableHasher> hashers) {
  const int64_t vocab = hashers[0].compressed_vocab_size();
  const std::vector<std::vector<int64_t>> prefixes = {{}, {vocab - 1}, {3, kDeadId, 8, 9, 10}};
  for (int length = 0; length <= longest; ++length) {
    const std::vector<int64_t> chunk = drawn_tokens(0xc0ffee + static_cast<uint64_t>(length), static_cast<size_t>(length), vocab);
    std::vector<size_t> cuts(static_cast<size_t>(cp) + 1, 0);
    cuts.back() = static_cast<size_t>(length);
    // cuts[1..cp-1] run through every non-decreasing sequence in [0, length].
    std::function<Status(size_t)> next = [&](size_t i) -> Status {
      if (i == static_cast<size_t>(cp)) {
        for (const auto& prefix : prefixes) ENGRAM_RETURN_IF_ERROR(check_cut(exchange, cp_rank, hashers, prefix, chunk, cuts));
        return Status::ok();
      }
      for (size_t c = cuts[i - 1]; c <= static_cast<size_t>(length); ++c) {
        cuts[i] = c;
        ENGRAM_RETURN_IF_ERROR(next(i + 1));
      }
      return Status::ok();
    };
    ENGRAM_RETURN_IF_ERROR(next(1));
  }
  return Status::ok();
}

// `count` random chunks (up to 40 tokens) cut at random offsets after random
// prefixes (up to 6 tokens), the same on every member (the seed decides).
inline Status check_random_cuts(const Exchange& exchange, int cp_rank, int cp, int count, uint64_t seed,
                                std::span<const TableHasher> hashers) {
  const int64_t vocab = hashers[0].compressed_vocab_size();
  uint64_t state = seed;
  for (int i = 0; i < count; ++i) {
    const size_t length = splitmix64_next(state) % 41;
    const std::vector<int64_t> chunk = drawn_tokens(splitmix64_next(state), length, vocab);
    const std::vector<int64_t> prefix = drawn_tokens(splitmix64_next(state), splitmix64_next(state) % 7, vocab);
    std::vector<size_t> cuts = {0, length};
    for (int k = 1; k < cp; ++k) cuts.push_back(splitmix64_next(state) % (length + 1));
    std::sort(cuts.begin(), cuts.end());
    ENGRAM_RETURN_IF_ERROR(check_cut(exchange, cp_rank, hashers, prefix, chunk, cuts));
  }
  return Status::ok();
}

}  // namespace engram::cp_cases
