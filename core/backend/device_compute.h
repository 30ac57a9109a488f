// What a lookup enqueues on a device: workspace allocation (at build time
// only), host memory registered for the device to read, asynchronous copies
// and fills, the gather kernels, the table fill, the request hasher's steps
// (the ids a lookup reads, hashed on the device), and device collectives for
// a group. Every enqueueing call only enqueues on the caller's stream: no
// allocation, no host synchronisation, so a lookup made of them can be
// captured in a CUDA graph.
//
// Implemented by backends/cuda (the real kernels, NCCL, cudaHostRegister)
// and by sim/ (the same calls on emulated device memory, executed at enqueue
// time with the CPU reference rules), so laptop tests and the swarm run the
// same call sequence, buffers and errors as a GPU.
//
// Addresses are DevicePtr of this rank's device: VMM mappings
// (DeviceMemory), workspace from allocate(), or registered host memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/backend/collectives.h"
#include "core/backend/device_memory.h"
#include "core/base/status.h"
#include "core/model/table_spec.h"

namespace engram {

class TableHasher;  // core/model/hashing.h

// The caller's stream, opaque to core (a cudaStream_t on the real backend;
// 0 there is the legacy default stream). The emulator ignores it.
struct StreamRef {
  uintptr_t handle = 0;
};

// How rows are stored and dequantised.
struct DeviceRowLayout {
  RowFormat format = RowFormat::kFp8E4M3Ue8m0;
  int dim = 0;             // bf16 values written per row
  uint64_t row_bytes = 0;  // stride of rows in a shard
  ScaleByteRule scale_byte_rule = ScaleByteRule::kVllm;  // scale bytes 0 and 255 (core/model/row_format.h)
  // -0 kept or written +0 (the emulator and the CUDA kernels both follow it).
  MinusZeroRule minus_zero = MinusZeroRule::kWritePlusZero;
};
DeviceRowLayout device_row_layout(const TableSpec& table);
// Its inverse for decoding rows: a TableSpec with the layout's format, dim
// and rules (no rows, no heads), what the CPU references take.
TableSpec row_decode_spec(const DeviceRowLayout& layout);

// Rows read for ids [tokens x ids_per_token], head positions
// [head_begin, head_begin + head_count) of each token, written to out
// [tokens x head_count x dim] bf16 by the lookup rule (core/lookup/lookup_types.h).
// Shard sources need the whole head window (head_begin 0, head_count
// ids_per_token); a range source may take any window (a TP slice).
//   - zero_missing: a row no shard holds (DEAD, out of the table, or outside
//     the shards given) writes a zero row; otherwise it is left untouched
//     (the collective path sums owners' rows into a zero-filled buffer).
struct DeviceGather {
  DevicePtr ids = 0;          // int64 (device memory)
  int64_t tokens = 0;
  int ids_per_token = 0;      // the table's head count (the stride of ids)
  int head_begin = 0;
  int head_count = 0;
  // The rows: either shards found by owner search (device arrays, uploaded
  // once at build time; a graph keeps pointing at them) ...
  DevicePtr shard_starts = 0; // int64[shard_count + 1]
  DevicePtr shard_bases = 0;  // DevicePtr[shard_count]
  int shard_count = 0;
  // ... or, when shard_count is 0, one row range passed by value: rows
  // [range_first_row, range_first_row + range_row_count) at range_base. A
  // range in registered host memory also gives its CPU address (host_rows),
  // so an implementation may gather those rows on the CPU.
  int64_t range_first_row = 0;
  int64_t range_row_count = 0;
  DevicePtr range_base = 0;
  const std::byte* host_rows = nullptr;
  bool zero_missing = true;
  DeviceRowLayout layout;
  DevicePtr out = 0;          // bf16
};

// The collectives of one group on device memory (NCCL's twin of Collectives).
// Every member enqueues the same calls in the same order.
class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // `all` receives size() * bytes_per_rank bytes in rank order.
  virtual Status all_gather(DevicePtr mine, DevicePtr all, uint64_t bytes_per_rank, StreamRef stream) = 0;
  // `input` holds size() chunks of count bf16 values; rank r receives the sum
  // of chunk r over all ranks (the sum rule of Collectives).
  virtual Status reduce_scatter_sum_bf16(DevicePtr input, DevicePtr output, uint64_t count, StreamRef stream) = 0;
  // `input` holds size() chunks of `bytes` bytes; rank r receives the
  // byte-wise maximum of chunk r over all ranks (NCCL's max over uint8).
  // Where one rank writes a value and every other rank zero bytes, that is
  // the value bit for bit, -0 included: the collective lookup's rows under an
  // engine that keeps -0 (MinusZeroRule::kKeep), whose sum would make it +0.
  virtual Status reduce_scatter_max_bytes(DevicePtr input, DevicePtr output, uint64_t bytes, StreamRef stream) = 0;
  // Chunk j of `send` (bytes_per_rank) goes to rank j's chunk rank() of `receive`.
  virtual Status all_to_all(DevicePtr send, DevicePtr receive, uint64_t bytes_per_rank, StreamRef stream) = 0;
};

// A lookup captured once and replayed: a CUDA graph on the real backend;
// the emulator keeps the enqueueing calls and runs them again.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  // One replay, waited for.
  virtual Status replay() = 0;
  // `warmup` untimed replays, then `replays` timed ones back to back: each
  // one's device time in microseconds (the emulator: its wall time).
  virtual Result<std::vector<double>> time(int warmup, int replays) = 0;
};

// A request hasher's state in device memory (core/lookup/device_request_hasher.h
// owns it; the words are core/model/request_hash_words.h). Histories,
// pending blocks and the error word persist across steps; a step's inputs
// live in fixed buffers the host (or a device producer) rewrites between
// replays, so one captured step replays across steps.
struct DeviceRequestState {
  // The rule, on the host (it outlives every captured step): the emulator
  // hashes with it; the CUDA kernel takes its sizes and multipliers.
  const TableHasher* hasher = nullptr;
  DevicePtr heads = 0;           // DeviceHashHead [head_count] = device_hash_heads(*hasher)
  int slot_count = 0;            // 1..kMaxDeviceRequestSlots (core/model/request_hash_words.h)
  DevicePtr histories = 0;       // int64 [2][slot_count][history_length], newest first: two buffers
  int64_t verify_tokens_max = 0; // the longest verify block a slot holds
  DevicePtr pending = 0;         // int64 [slot_count][verify_tokens_max]: each slot's verify block
  DevicePtr pending_counts = 0;  // int64 [slot_count]: its length, 0 when none
  DevicePtr error = 0;           // uint64: kNoDeviceHashError or the smallest bad input found
};

// One extend or verify step over a ragged batch: tokens [0, token_count)
// hashed after their slots' histories (buffer header[1]) into row_ids;
// tokens no run covers get DEAD for every head. Extend writes every slot's
// history into the other buffer (each run's slot advanced by its tokens,
// the rest copied), so a replay of the same step gives the same result;
// verify keeps the histories and stores each run as its slot's pending
// block. Runs: real slots only, non-empty, sorted by token_begin, disjoint,
// distinct slots (the host hasher sends them so; the device checks all but
// the last and reports a breach in the error word). A covered token outside
// the vocabulary sets the error word, gets DEAD ids and is taken as DEAD
// from there on (the lookback of the tokens after it, the history, the
// pending block): never an id read through a value outside the vocabulary.
struct DeviceRequestHash {
  DeviceRequestState state;
  bool verify = false;
  DevicePtr tokens = 0;          // int64 [token_count]
  int64_t token_count = 0;       // fixed for a captured step (its bucket)
  DevicePtr header = 0;          // int64 [2], read on the device: the step's runs (0..slot_count), the buffer read
  DevicePtr runs = 0;            // DeviceRunWords [slot_count]
  DevicePtr row_ids = 0;         // int64 [token_count][head_count]
};

// The commit after a verify: each commit's slot appends its pending block's
// anchor and first accepted_drafts drafts to its history (in place, in
// buffer header[1]); the block is gone. A bad commit: none of the step's.
struct DeviceRequestCommit {
  DeviceRequestState state;
  DevicePtr header = 0;          // int64 [2], read on the device: the commits (0..slot_count), the buffer
  DevicePtr commits = 0;         // DeviceCommitWords [slot_count]
};

// The shapes both backends check before enqueueing (invalid_argument naming
// the field): a hasher, slot_count 1..kMaxDeviceRequestSlots, every buffer given,
// token_count >= 0.
Status check_request_state(const DeviceRequestState& state, const char* call);
Status check_request_hash(const DeviceRequestHash& args);
Status check_request_commit(const DeviceRequestCommit& args);

// gather's contract, one message for every CPU-side implementation
// (invalid_argument naming the call and the field): heads inside the ids per
// token, a shard source over every head with zero rows for ids it lacks, the
// owned-rows gather over every head, row_bytes at least a row, and a
// host-rows gather within `prepared_ids_max` slots (0: not prepared).
Status check_gather(const DeviceGather& args, int rank, int64_t prepared_ids_max);

// copy_to_host_strided's contract, one message for every backend:
// invalid_argument naming the field, its value and the rule.
Status check_strided_copy(uint64_t dst_bytes, uint64_t row_bytes, uint64_t src_pitch_bytes, int rank);

class DeviceCompute {
 public:
  virtual ~DeviceCompute() = default;

  // Plain device memory for lookup workspaces. Build time only.
  virtual Result<DevicePtr> allocate(uint64_t bytes) = 0;
  virtual Status free(DevicePtr address) = 0;

  // Sizes what lookups need beyond their buffers (e.g. staging for host
  // tables) for lookups of up to `ids_max` ids of rows up to `row_bytes_max`.
  // Build time only; a later gather larger than this is refused.
  virtual Status prepare_lookups(int64_t ids_max, uint64_t row_bytes_max, bool host_tables) = 0;

  // Host memory the device reads through the returned address (pinned and
  // mapped; read-only for the device where the driver allows). Unregister
  // before the host memory is unmapped, on every path.
  virtual Result<DevicePtr> register_host(std::span<const std::byte> host) = 0;
  virtual Status unregister_host(std::span<const std::byte> host) = 0;

  // Host <-> device copies, synchronous (set-up and the host-span lookup).
  virtual Status copy_to_device(DevicePtr dst, std::span<const std::byte> src) = 0;
  virtual Status copy_to_host(std::span<std::byte> dst, DevicePtr src) = 0;
  // dst.size() / row_bytes rows of row_bytes each, row k read at src + k x
  // src_pitch_bytes (cudaMemcpy2D): one call where a group's per-member
  // headers would take one copy each. row_bytes > 0, a divisor of
  // dst.size(), at most src_pitch_bytes.
  virtual Status copy_to_host_strided(std::span<std::byte> dst, DevicePtr src, uint64_t row_bytes,
                                      uint64_t src_pitch_bytes) = 0;

  // Enqueued on `stream`.
  virtual Status copy_async(DevicePtr dst, DevicePtr src, uint64_t bytes, StreamRef stream) = 0;
  virtual Status fill_async(DevicePtr dst, uint8_t value, uint64_t bytes, StreamRef stream) = 0;
  virtual Status gather(const DeviceGather& args, StreamRef stream) = 0;
  // Rows [first_row, first_row + rows) of `table`, as core/model/table_fill
  // writes them (the same bytes), at dst (device or registered host memory).
  virtual Status fill_table_rows(DevicePtr dst, const TableSpec& table, uint64_t seed, int64_t first_row,
                                 int64_t rows, StreamRef stream) = 0;
  // The request hasher's steps (DeviceRequestHash, DeviceRequestCommit above).
  virtual Status hash_requests(const DeviceRequestHash& args, StreamRef stream) = 0;
  virtual Status commit_requests(const DeviceRequestCommit& args, StreamRef stream) = 0;
  virtual Status synchronize(StreamRef stream) = 0;

  // Captures what `enqueue` enqueues on the stream it is given (a stream of
  // the graph's own) into a graph. Nothing runs until a replay. Collective
  // calls inside are captured too, so every member of their group captures
  // and replays alike.
  virtual Result<std::unique_ptr<DeviceGraph>> capture(const std::function<Status(StreamRef)>& enqueue) = 0;

  // Device collectives over the members of `bootstrap` (collective: every
  // member calls it; the bootstrap carries the setup, e.g. NCCL's unique id).
  virtual Result<std::unique_ptr<DeviceCollectives>> connect(Collectives& bootstrap) = 0;
};

}  // namespace engram
