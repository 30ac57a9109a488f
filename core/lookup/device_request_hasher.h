// The request hasher on a device: RequestHasher's operations
// (core/model/request_hasher.h) with the histories in device memory, so a
// step's ids are hashed where the lookup reads them (row_ids() is the
// lookup's DeviceLookupRequest::row_ids: hash and lookup on one stream,
// capturable together), bitwise equal to the CPU hasher.
//
// Device memory (one allocation, made at create): the table's heads
// (DeviceHashHead), per slot its history (max order - 1 ids, newest first;
// two buffers: an extend reads the one its header names and writes the
// other, so its blocks never wait for one another and a replay of the same
// step gives the same result) and its pending verify block, the error word,
// and fixed step buffers: the tokens (tokens_max), the runs and commits with
// their headers (count, history buffer), the row ids (tokens_max x heads).
// At most kMaxDeviceRequestSlots slots. The host side mirrors the slot states
// (core/model/request_slots.h) and refuses bad input with the CPU hasher's
// errors before anything reaches the device.
//
// Steps: stage_X(...) checks a step and writes its inputs into the fixed
// buffers; enqueue_X(stream, ...) enqueues its kernel, reading only those
// buffers (no allocation, no host sync): capture it once
// (DeviceCompute::capture, with the lookup after it) and replay the graph
// after each stage. extend / verify / commit(..., stream) stage and enqueue
// in one call (eager).
//
// Host calls (create, begin, stage_*, check_device_errors, read_histories)
// copy to and from device memory synchronously: make them once the work
// enqueued before has finished (a graph replay waits for itself; after an
// eager step, synchronize its stream). Each staged step is enqueued (or its
// graph replayed: again, to the same effect) before the next is staged.
//
// Tokens outside the vocabulary: where the host sees the tokens (stage_*)
// they are refused there (invalid_argument, nothing written). A producer
// that writes tokens() itself (a sampler on the device) is checked on the
// device: a bad token gets DEAD ids and is taken as DEAD from there on (the
// lookback of the tokens after it, its slot's history, a pending block), so
// no id is ever read through a value outside the vocabulary, and the error
// word keeps the first one until check_device_errors() reads it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/backend/device_compute.h"
#include "core/base/status.h"
#include "core/model/hashing.h"
#include "core/model/request_slots.h"

namespace engram {

struct DeviceRequestHasherOptions {
  int slot_count = 1;
  int64_t tokens_max = 1;         // a step's tokens at most (the token buffer; row ids tokens_max x heads)
  int64_t verify_tokens_max = 16; // a verify block's tokens at most (anchor + drafts), per slot
};

class DeviceRequestHasher {
 public:
  static Result<std::unique_ptr<DeviceRequestHasher>> create(DeviceCompute& compute, TableHasher hasher,
                                                             const DeviceRequestHasherOptions& options);
  ~DeviceRequestHasher();  // frees what free() did not (errors dropped: a failure path)
  DeviceRequestHasher(const DeviceRequestHasher&) = delete;
  DeviceRequestHasher& operator=(const DeviceRequestHasher&) = delete;
  // Gives the device memory back; the hasher is unusable after.
  Status free();

  const TableHasher& table_hasher() const { return hasher_; }
  const DeviceRequestHasherOptions& options() const { return options_; }
  RequestSlots::SlotState state(int slot) const { return slots_.state(slot); }

  // As RequestHasher's: a new request on a free slot after its preceding ids
  // (empty, a cached prefix, or lookback ids handed over); a slot freed.
  Status begin(int slot, std::span<const int64_t> preceding_ids = {});
  Status release(int slot);

  // A step checked (RequestHasher's errors; then at most tokens_max tokens,
  // verify blocks of at most verify_tokens_max) and written into the fixed
  // buffers. Nothing is written when refused.
  Status stage_extend(std::span<const int64_t> tokens, std::span<const RequestRun> runs);
  Status stage_verify(std::span<const int64_t> tokens, std::span<const RequestRun> runs);
  Status stage_commit(std::span<const VerifyCommit> commits);

  // The staged step's kernel over tokens [0, token_count) of the fixed
  // buffer (1..tokens_max; a captured step keeps its count, so capture the
  // bucket: tokens past a step's own are padding and hash to DEAD).
  Status enqueue_extend(StreamRef stream, int64_t token_count) const;
  Status enqueue_verify(StreamRef stream, int64_t token_count) const;
  Status enqueue_commit(StreamRef stream) const;

  // Stage and enqueue (eager), over the step's own tokens.
  Status extend(std::span<const int64_t> tokens, std::span<const RequestRun> runs, StreamRef stream);
  Status verify(std::span<const int64_t> tokens, std::span<const RequestRun> runs, StreamRef stream);
  Status commit(std::span<const VerifyCommit> commits, StreamRef stream);

  // int64 [tokens_max][heads]: the last step's ids (DEAD past its tokens when
  // enqueued over a bucket).
  DevicePtr row_ids() const { return base_ + layout_.row_ids; }
  // int64 [tokens_max]: the step's tokens, for a producer on the device.
  DevicePtr tokens() const { return base_ + layout_.tokens; }

  // Reads the device's error word: ok, or invalid_argument naming the step,
  // the request or token and the value; the word is cleared.
  Status check_device_errors();
  // Every slot's history, [slot_count][history_length] (tests, checks).
  Result<std::vector<int64_t>> read_histories() const;

 private:
  // Offsets of the buffers in the one allocation.
  struct Layout {
    uint64_t heads = 0, histories = 0, pending = 0, pending_counts = 0, error = 0, run_header = 0, runs = 0,
             commit_header = 0, commits = 0, tokens = 0, row_ids = 0, bytes = 0;
  };
  DeviceRequestHasher(DeviceCompute& compute, TableHasher hasher, const DeviceRequestHasherOptions& options,
                      RequestSlots slots);
  DeviceRequestState device_state() const;
  // Where slot `slot`'s history starts in the buffer the next step reads.
  uint64_t history_offset(int slot) const;
  Status check_step_tokens(std::span<const int64_t> tokens, const char* operation) const;
  Status write_step(std::span<const int64_t> tokens, std::span<const RequestRun> runs);
  Status check_enqueue(int64_t token_count, const char* operation) const;
  Status enqueue_hash(StreamRef stream, int64_t token_count, bool verify, const char* operation) const;
  template <typename T>
  Status write_words(uint64_t offset, std::span<const T> words);
  template <typename T>
  Result<T> read_word(uint64_t offset) const;

  DeviceCompute& compute_;
  TableHasher hasher_;  // its address is in every captured step: the hasher does not move
  DeviceRequestHasherOptions options_;
  RequestSlots slots_;
  Layout layout_;
  DevicePtr base_ = 0;
  int64_t history_buffer_ = 0;  // the history buffer the next step reads: each extend writes the other
  const char* last_step_ = "step";  // names the step in a device error
};

}  // namespace engram
