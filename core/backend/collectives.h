// Collectives and bootstrap over a group of ranks, on host memory. The
// emulator runs them in-process with a seeded interleaving; the real host
// backend runs them over TCP; NCCL provides the device-memory twin.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/base/derived_once.h"
#include "core/base/status.h"

namespace engram {

// What all_gather_shared hands its caller: the gathered bytes, and what the
// members that received this one buffer derive from them (decoded facts, a
// plan), made once by the first and shared by the rest. Where one buffer
// goes to many ranks (the emulator's), the memo is theirs and goes with the
// buffer; where a rank gets a buffer of its own (a real one), so is the memo.
struct GatheredBytes {
  std::vector<std::byte> bytes;
  DerivedOnce derived;
};

class Collectives {
 public:
  virtual ~Collectives() = default;

  virtual int rank() const = 0;  // rank within this group
  virtual int size() const = 0;
  virtual int world_rank() const = 0;  // rank in the job, for error context

  // Every rank contributes `mine`; `all` receives size() * mine.size() bytes
  // in group-rank order. All ranks pass the same length.
  virtual Status all_gather(std::span<const std::byte> mine, std::span<std::byte> all) = 0;

  // The same all-gather, for a caller that only reads the result: a backend
  // that runs many ranks in one process (the emulator) hands every member
  // one buffer, so N ranks hold N contributions, not N x N, and derive from
  // them once (GatheredBytes::derived). The default gathers into a buffer of
  // the caller's own.
  virtual Result<std::shared_ptr<const GatheredBytes>> all_gather_shared(std::span<const std::byte> mine);

  // `input` holds size() chunks of out.size() bf16 values; rank r receives the
  // sum of chunk r over all ranks. Sums as NCCL's ring does: starting from
  // rank (r+1) % size, each step adds in float and rounds to bf16.
  virtual Status reduce_scatter_sum_bf16(std::span<const uint16_t> input, std::span<uint16_t> output) = 0;

  // Rank r's send chunk j goes to rank j's receive chunk r. Equal chunks.
  virtual Status all_to_all(std::span<const std::byte> send, std::span<std::byte> receive) = 0;

  virtual Status barrier() = 0;

  // Ranks with the same color form a new group, ordered by key (then rank).
  virtual Result<std::unique_ptr<Collectives>> split(int color, int key) = 0;
};

// `input` holds group.size() chunks of output.size() bytes; this rank
// receives the byte-wise maximum of its chunk over all ranks, through one
// all_to_all (the host twin of DeviceCollectives::reduce_scatter_max_bytes).
// Where one rank holds an element and the others give zero bytes, that is
// the holder's bits: a collective lookup whose engine keeps -0 (vLLM).
Status reduce_scatter_max_bytes(Collectives& group, std::span<const std::byte> input, std::span<std::byte> output);

// Reduce-scatter reference arithmetic shared by every implementation.
void reduce_scatter_sum_bf16_reference(std::span<const std::span<const uint16_t>> inputs_by_rank,
                                       int receiving_rank, std::span<uint16_t> output);

}  // namespace engram
