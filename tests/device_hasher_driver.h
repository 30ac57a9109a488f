// A DeviceRequestHasher driven with RequestHasher's five operations, for
// harness::run_request_schedule and the engines' cases, on any DeviceCompute
// (the emulator: tests/device_request_hasher_test.cc; a GPU:
// tests/gpu/device_request_hasher_test.cc). Eagerly, or through three graphs
// (extend, verify, commit) captured once over the whole token buffer and
// replayed after each stage. Every operation runs on a CPU RequestHasher in
// lockstep too: after each one the device's histories must equal the CPU's,
// ids past a step's tokens must be DEAD, and the device error word clear.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <span>
#include <vector>

#include "core/backend/device_compute.h"
#include "core/lookup/device_request_hasher.h"
#include "core/model/request_hasher.h"

namespace engram::testing_support {

class DeviceHasherDriver {
 public:
  enum class Mode { kEager, kGraph };

  static Result<std::unique_ptr<DeviceHasherDriver>> create(DeviceCompute& compute, const TableHasher& hasher,
                                                            const DeviceRequestHasherOptions& options, Mode mode) {
    ENGRAM_ASSIGN_OR_RETURN(auto device, DeviceRequestHasher::create(compute, hasher, options));
    ENGRAM_ASSIGN_OR_RETURN(RequestHasher cpu, RequestHasher::create(hasher, options.slot_count));
    std::unique_ptr<DeviceHasherDriver> d(new DeviceHasherDriver(compute, std::move(device), std::move(cpu), mode));
    if (mode == Mode::kGraph) {
      const DeviceRequestHasher* h = d->device_.get();
      const int64_t bucket = options.tokens_max;
      ENGRAM_ASSIGN_OR_RETURN(d->extend_graph_,
                              compute.capture([h, bucket](StreamRef s) { return h->enqueue_extend(s, bucket); }));
      ENGRAM_ASSIGN_OR_RETURN(d->verify_graph_,
                              compute.capture([h, bucket](StreamRef s) { return h->enqueue_verify(s, bucket); }));
      ENGRAM_ASSIGN_OR_RETURN(d->commit_graph_, compute.capture([h](StreamRef s) { return h->enqueue_commit(s); }));
    }
    return d;
  }

  DeviceRequestHasher& device() { return *device_; }
  const RequestHasher& cpu() const { return cpu_; }
  int64_t steps() const { return steps_; }

  Status begin(int slot, std::span<const int64_t> preceding_ids = {}) {
    const Status cpu = cpu_.begin(slot, preceding_ids);
    const Status device = device_->begin(slot, preceding_ids);
    ENGRAM_RETURN_IF_ERROR(same_refusal(cpu, device, "begin"));
    if (!cpu.is_ok()) return cpu;
    return after_step("begin");
  }
  Status release(int slot) {
    const Status cpu = cpu_.release(slot);
    const Status device = device_->release(slot);
    ENGRAM_RETURN_IF_ERROR(same_refusal(cpu, device, "release"));
    if (!cpu.is_ok()) return cpu;
    return after_step("release");
  }
  Status extend(std::span<const int64_t> tokens, std::span<const RequestRun> runs, std::span<int64_t> row_ids) {
    return hash_step(tokens, runs, row_ids, false);
  }
  Status verify(std::span<const int64_t> tokens, std::span<const RequestRun> runs, std::span<int64_t> row_ids) {
    return hash_step(tokens, runs, row_ids, true);
  }
  Status commit(std::span<const VerifyCommit> commits) {
    const Status cpu = cpu_.commit(commits);
    Status device = device_->stage_commit(commits);
    ENGRAM_RETURN_IF_ERROR(same_refusal(cpu, device, "commit"));
    if (!cpu.is_ok()) return cpu;
    ENGRAM_RETURN_IF_ERROR(mode_ == Mode::kGraph ? commit_graph_->replay() : device_->enqueue_commit(StreamRef{}));
    ENGRAM_RETURN_IF_ERROR(compute_.synchronize(StreamRef{}));
    return after_step("commit");
  }
  // Every slot in use released (between schedules).
  Status release_all() {
    for (int slot = 0; slot < cpu_.slot_count(); ++slot)
      if (cpu_.state(slot) != RequestHasher::SlotState::kFree) ENGRAM_RETURN_IF_ERROR(release(slot));
    return Status::ok();
  }

 private:
  DeviceHasherDriver(DeviceCompute& compute, std::unique_ptr<DeviceRequestHasher> device, RequestHasher cpu, Mode mode)
      : compute_(compute), device_(std::move(device)), cpu_(std::move(cpu)), mode_(mode) {}

  // Both refused alike (same code and message) or both accepted.
  static Status same_refusal(const Status& cpu, const Status& device, const char* op) {
    if (cpu.code() != device.code() || cpu.message() != device.message())
      return internal_error(fmt::format("{}: the CPU hasher said '{}', the device hasher '{}'", op, cpu.to_string(),
                                        device.to_string()));
    return Status::ok();
  }

  Status hash_step(std::span<const int64_t> tokens, std::span<const RequestRun> runs, std::span<int64_t> row_ids,
                   bool verify) {
    const char* op = verify ? "verify" : "extend";
    const Status cpu = verify ? cpu_.verify(tokens, runs, row_ids) : cpu_.extend(tokens, runs, row_ids);
    const Status device = verify ? device_->stage_verify(tokens, runs) : device_->stage_extend(tokens, runs);
    if (!cpu.is_ok() || !device.is_ok()) {
      // The device hasher may refuse a step of the CPU's shape beyond its buffers; else both alike.
      ENGRAM_RETURN_IF_ERROR(same_refusal(cpu, device, op));
      return cpu;
    }
    const auto count = static_cast<int64_t>(tokens.size());
    if (mode_ == Mode::kGraph) {
      ENGRAM_RETURN_IF_ERROR((verify ? verify_graph_ : extend_graph_)->replay());
    } else {
      ENGRAM_RETURN_IF_ERROR(verify ? device_->enqueue_verify(StreamRef{}, count)
                                    : device_->enqueue_extend(StreamRef{}, count));
    }
    ENGRAM_RETURN_IF_ERROR(compute_.synchronize(StreamRef{}));
    const size_t heads = static_cast<size_t>(cpu_.table_hasher().head_count());
    const int64_t covered = mode_ == Mode::kGraph ? device_->options().tokens_max : count;
    std::vector<int64_t> got(static_cast<size_t>(covered) * heads);
    ENGRAM_RETURN_IF_ERROR(compute_.copy_to_host(std::as_writable_bytes(std::span(got)), device_->row_ids()));
    for (size_t k = 0; k < got.size(); ++k) {
      const int64_t want = k < row_ids.size() ? row_ids[k] : kDeadId;
      if (got[k] != want)
        return internal_error(fmt::format("{} ({}): token {} head {}: the device hashed {}, the CPU hasher {}{}", op,
                                          mode_ == Mode::kGraph ? "graph replay" : "eager", k / heads, k % heads,
                                          got[k], want, k < row_ids.size() ? "" : " (padding past the step)"));
    }
    std::copy(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(row_ids.size()), row_ids.begin());
    return after_step(op);
  }

  Status after_step(const char* op) {
    ++steps_;
    ENGRAM_RETURN_IF_ERROR(device_->check_device_errors());
    ENGRAM_ASSIGN_OR_RETURN(const std::vector<int64_t> histories, device_->read_histories());
    const size_t length = static_cast<size_t>(cpu_.table_hasher().history_length());
    for (int slot = 0; slot < cpu_.slot_count(); ++slot) {
      if (cpu_.state(slot) == RequestHasher::SlotState::kFree) continue;  // a freed slot's words are not read again
      const auto want = cpu_.history(slot);
      for (size_t k = 0; k < length; ++k)
        if (histories[static_cast<size_t>(slot) * length + k] != want[k])
          return internal_error(fmt::format("after {}: slot {} history[{}] is {} on the device, {} on the CPU", op,
                                            slot, k, histories[static_cast<size_t>(slot) * length + k], want[k]));
    }
    return Status::ok();
  }

  DeviceCompute& compute_;
  std::unique_ptr<DeviceRequestHasher> device_;
  RequestHasher cpu_;
  Mode mode_;
  std::unique_ptr<DeviceGraph> extend_graph_, verify_graph_, commit_graph_;
  int64_t steps_ = 0;
};

// vLLM's test_engram_hash_cache_replay: 2 requests, 3 steps of
// query_length tokens each, every 5th token DEAD, the third step fully
// padded (both runs idle): its ids all DEAD and the histories untouched;
// a fourth step continues as if it never happened. Every step's ids equal
// hashing each request's accepted sequence whole.
inline Status vllm_hash_cache_replay(DeviceCompute& compute, const TableHasher& hasher, int64_t query_length,
                                     DeviceHasherDriver::Mode mode) {
  DeviceRequestHasherOptions options;
  options.slot_count = 2;
  options.tokens_max = 2 * query_length;
  ENGRAM_ASSIGN_OR_RETURN(auto driver, DeviceHasherDriver::create(compute, hasher, options, mode));
  ENGRAM_RETURN_IF_ERROR(driver->begin(0));
  ENGRAM_RETURN_IF_ERROR(driver->begin(1));
  const size_t heads = static_cast<size_t>(hasher.head_count());
  std::vector<std::vector<int64_t>> accepted(2);
  uint64_t state = 99 + static_cast<uint64_t>(query_length);
  int64_t position = 0;
  for (int step = 0; step < 4; ++step) {
    const bool padded = step == 2;
    std::vector<int64_t> tokens;
    std::vector<RequestRun> runs;
    for (int r = 0; r < 2; ++r) {
      runs.push_back(RequestRun{padded ? kIdleSlot : r, static_cast<int64_t>(tokens.size()), query_length});
      for (int64_t k = 0; k < query_length; ++k) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const int64_t drawn = static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(hasher.compressed_vocab_size()));
        tokens.push_back(++position % 5 == 0 ? kDeadId : drawn);
      }
    }
    ENGRAM_ASSIGN_OR_RETURN(const std::vector<int64_t> before, driver->device().read_histories());
    std::vector<int64_t> ids(tokens.size() * heads);
    ENGRAM_RETURN_IF_ERROR(driver->extend(tokens, runs, ids));
    ENGRAM_ASSIGN_OR_RETURN(const std::vector<int64_t> after, driver->device().read_histories());
    if (padded) {
      if (ids != std::vector<int64_t>(ids.size(), kDeadId))
        return internal_error("the fully padded step read a row (an idle slot must hash to DEAD, never row 0)");
      if (after != before) return internal_error("the fully padded step changed a history");
      continue;
    }
    for (int r = 0; r < 2; ++r) {
      const auto first = tokens.begin() + runs[r].token_begin;
      accepted[r].insert(accepted[r].end(), first, first + query_length);
      std::vector<int64_t> whole(accepted[r].size() * heads);
      ENGRAM_RETURN_IF_ERROR(hasher.hash(accepted[r], {}, whole));
      if (!std::equal(whole.end() - static_cast<std::ptrdiff_t>(query_length * static_cast<int64_t>(heads)),
                      whole.end(), ids.begin() + runs[r].token_begin * static_cast<int64_t>(heads)))
        return internal_error(fmt::format("step {} request {}: the ids differ from hashing the sequence whole", step, r));
    }
  }
  return Status::ok();
}

}  // namespace engram::testing_support
