#include "sim/sim_device_compute.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <cstring>
#include <vector>

#include "core/base/units.h"
#include "core/model/gpu_models.h"
#include "core/model/table_fill.h"
#include "core/model/hashing.h"
#include "core/model/request_hash_words.h"
#include "kernels/gather_reference.h"
#include "kernels/request_hash_reference.h"
#include "sim/sim_collectives.h"

namespace engram::sim {
namespace {

// Registered host memory gets device addresses in a window of its own per
// rank, apart from the VMM windows, so a host address used as a device one
// (or another rank's) is an illegal address, as on hardware. Above every VMM
// window (those grow with the rank count: 1,152 ranks reach past 2^50).
constexpr DevicePtr kHostWindowBase = 1ull << 62;
constexpr DevicePtr kHostWindowBytes = 1ull << 36;

class SimDeviceCollectives final : public DeviceCollectives {
 public:
  SimDeviceCollectives(SimDeviceCompute& compute, Collectives& group) : compute_(compute), group_(group) {}
  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }

  Status all_gather(DevicePtr mine, DevicePtr all, uint64_t bytes_per_rank, StreamRef) override {
    std::vector<std::byte> in(bytes_per_rank);
    ENGRAM_RETURN_IF_ERROR(compute_.read(mine, in, "ncclAllGather"));
    // Every member receives the same bytes: one copy, held as an extent by each.
    ENGRAM_ASSIGN_OR_RETURN(std::shared_ptr<const GatheredBytes> out, group_.all_gather_shared(in));
    return compute_.write_shared(all, SharedBytes(out, &out->bytes), "ncclAllGather");
  }
  Status reduce_scatter_sum_bf16(DevicePtr input, DevicePtr output, uint64_t count, StreamRef) override {
    if (auto* sparse = dynamic_cast<SparseReduceScatter*>(&group_)) {
      return reduce_written_runs(input, output, count, [&](std::span<const Bf16Run> runs, std::span<uint16_t> out) {
        return sparse->reduce_scatter_sum_bf16_runs(count, runs, out);
      });
    }
    std::vector<uint16_t> in(count * static_cast<uint64_t>(size())), out(count);
    ENGRAM_RETURN_IF_ERROR(compute_.read(input, std::as_writable_bytes(std::span(in)), "ncclReduceScatter"));
    ENGRAM_RETURN_IF_ERROR(group_.reduce_scatter_sum_bf16(in, out));
    return compute_.write(output, std::as_bytes(std::span(out)), "ncclReduceScatter");
  }
  Status reduce_scatter_max_bytes(DevicePtr input, DevicePtr output, uint64_t bytes, StreamRef) override {
    // The lookup's rows: whole bf16 values (the runs and chunks are bf16).
    if (bytes % 2 != 0)
      return invalid_argument(fmt::format("ncclReduceScatter (max): {} bytes a chunk; the emulator reduces bf16 "
                                          "rows, an even count",
                                          bytes));
    const uint64_t count = bytes / 2;
    if (auto* sparse = dynamic_cast<SparseReduceScatter*>(&group_)) {
      return reduce_written_runs(input, output, count, [&](std::span<const Bf16Run> runs, std::span<uint16_t> out) {
        return sparse->reduce_scatter_max_bytes_runs(count, runs, out);
      });
    }
    // Any other group (real processes): the whole input, through the group's all_to_all.
    std::vector<std::byte> in(bytes * static_cast<uint64_t>(size())), out(bytes);
    ENGRAM_RETURN_IF_ERROR(compute_.read(input, in, "ncclReduceScatter"));
    ENGRAM_RETURN_IF_ERROR(engram::reduce_scatter_max_bytes(group_, in, out));
    return compute_.write(output, out, "ncclReduceScatter");
  }
  Status all_to_all(DevicePtr send, DevicePtr receive, uint64_t bytes_per_rank, StreamRef) override {
    const uint64_t total = bytes_per_rank * static_cast<uint64_t>(size());
    std::vector<std::byte> in(total), out(total);
    ENGRAM_RETURN_IF_ERROR(compute_.read(send, in, "ncclSend"));
    ENGRAM_RETURN_IF_ERROR(group_.all_to_all(in, out));
    return compute_.write(receive, out, "ncclRecv");
  }

 private:
  // Only what this rank wrote travels: the collective lookup's input is
  // size() x count values of which a rank writes its own rows.
  template <class Reduce>
  Status reduce_written_runs(DevicePtr input, DevicePtr output, uint64_t count, const Reduce& reduce) {
    std::vector<std::vector<uint16_t>> values;
    std::vector<uint64_t> firsts;
    ENGRAM_RETURN_IF_ERROR(compute_.for_each_written(
        input, count * static_cast<uint64_t>(size()) * 2, "ncclReduceScatter",
        [&](uint64_t offset, std::span<const std::byte> bytes) {
          ENGRAM_CHECK(offset % 2 == 0 && bytes.size() % 2 == 0);
          firsts.push_back(offset / 2);
          values.emplace_back(bytes.size() / 2);
          std::memcpy(values.back().data(), bytes.data(), bytes.size());
        }));
    std::vector<Bf16Run> runs(values.size());
    for (size_t i = 0; i < runs.size(); ++i) runs[i] = {firsts[i], values[i]};
    std::vector<uint16_t> out(count);
    ENGRAM_RETURN_IF_ERROR(reduce(std::span<const Bf16Run>(runs), std::span<uint16_t>(out)));
    return compute_.write(output, std::as_bytes(std::span(out)), "ncclReduceScatter");
  }

  SimDeviceCompute& compute_;
  Collectives& group_;  // the bootstrap group; outlives this (the caller's contract)
};

}  // namespace

SimDeviceCompute::SimDeviceCompute(SimContext& context, SimDeviceMemory& memory, int rank)
    : context_(context),
      memory_(memory),
      rank_(rank),
      next_host_address_(kHostWindowBase + static_cast<DevicePtr>(rank) * kHostWindowBytes) {}

Status SimDeviceCompute::alive(const char* call) const {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, call);
  return Status::ok();
}

Result<DevicePtr> SimDeviceCompute::allocate(uint64_t bytes) {
  ENGRAM_RETURN_IF_ERROR(alive("cudaMalloc"));
  // cudaMalloc rounds up; the emulator takes it as VMM memory of this GPU so
  // it counts against the GPU's memory and shows in the ledger. Plain
  // memory, as cudaMalloc's: it works whatever handle types the GPU exports.
  const uint64_t rounded = round_up(std::max<uint64_t>(bytes, 1), kVmmGranularityBytes);
  ENGRAM_ASSIGN_OR_RETURN(MappedAllocation allocation,
                          MappedAllocation::create(memory_, rounded, HandleType::kNone));
  const DevicePtr address = allocation.address();
  allocations_.emplace(address, std::move(allocation));
  return address;
}

Status SimDeviceCompute::free(DevicePtr address) {
  auto it = allocations_.find(address);
  if (it == allocations_.end()) {
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("cudaFree({:#x}): not an allocation of this rank's device compute", address),
                  {rank_, -1, "free"});
  }
  Status released = it->second.release();
  allocations_.erase(it);
  return released;
}

Status SimDeviceCompute::prepare_lookups(int64_t ids_max, uint64_t row_bytes_max, bool host_tables) {
  if (ids_max <= 0 || row_bytes_max == 0) {
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("prepare_lookups: ids_max {} and row_bytes_max {} must be positive", ids_max,
                              row_bytes_max),
                  {rank_, -1, "prepare lookups"});
  }
  if (host_tables) {
    prepared_ids_max_ = ids_max;
    prepared_row_bytes_max_ = row_bytes_max;
  }
  return Status::ok();
}

Result<DevicePtr> SimDeviceCompute::register_host(std::span<const std::byte> host) {
  ENGRAM_RETURN_IF_ERROR(alive("cudaHostRegister"));
  if (host.empty()) {
    return Status(ErrorCode::kInvalidArgument, "cudaHostRegister: the host range is empty", {rank_, -1, "register host"});
  }
  for (const auto& [address, r] : registrations_) {
    if (host.data() < r.host.data() + r.host.size() && r.host.data() < host.data() + host.size()) {
      return Status(ErrorCode::kInvalidArgument,
                    "cudaHostRegister: cudaErrorHostMemoryAlreadyRegistered: part of this range is registered",
                    {rank_, -1, "register host"});
    }
  }
  const DevicePtr address = next_host_address_;
  next_host_address_ += round_up(host.size(), kVmmGranularityBytes);
  const uint64_t ledger_id =
      context_.ledger().add(ResourceKind::kHostRegistration, rank_, host.size(), LedgerDetail::at(address));
  registrations_[address] = Registration{host, ledger_id};
  return address;
}

Status SimDeviceCompute::unregister_host(std::span<const std::byte> host) {
  for (auto it = registrations_.begin(); it != registrations_.end(); ++it) {
    if (it->second.host.data() != host.data()) continue;
    context_.ledger().remove(ResourceKind::kHostRegistration, it->second.ledger_id);
    registrations_.erase(it);
    return Status::ok();
  }
  return Status(ErrorCode::kInvalidArgument,
                "cudaHostUnregister: cudaErrorHostMemoryNotRegistered: that range was never registered",
                {rank_, -1, "unregister host"});
}

const SimDeviceCompute::Registration* SimDeviceCompute::registered(DevicePtr address, uint64_t bytes,
                                                                   DevicePtr* base) const {
  auto it = registrations_.upper_bound(address);
  if (it == registrations_.begin()) return nullptr;
  --it;
  if (address + bytes > it->first + it->second.host.size()) return nullptr;
  *base = it->first;
  return &it->second;
}

Status SimDeviceCompute::read(DevicePtr src, std::span<std::byte> dst, const char* call) {
  ENGRAM_RETURN_IF_ERROR(alive(call));
  if (dst.empty()) return Status::ok();
  DevicePtr base = 0;
  if (const Registration* r = registered(src, dst.size(), &base)) {
    std::memcpy(dst.data(), r->host.data() + (src - base), dst.size());
    return Status::ok();
  }
  if (src >= kHostWindowBase && src < kHostWindowBase + kHostWindowBytes * static_cast<DevicePtr>(context_.rank_count())) {
    return Status(ErrorCode::kInternal,
                  fmt::format("{}: CUDA_ERROR_ILLEGAL_ADDRESS: {:#x}+{} is not inside this rank's registered host "
                              "memory", call, src, dst.size()),
                  {rank_, -1, call});
  }
  return memory_.copy_from_device(dst, src);
}

Status SimDeviceCompute::write(DevicePtr dst, std::span<const std::byte> src, const char* call) {
  ENGRAM_RETURN_IF_ERROR(alive(call));
  if (src.empty()) return Status::ok();
  DevicePtr base = 0;
  if (const Registration* r = registered(dst, src.size(), &base)) {
    // Host tables are written by their fill through the device's mapping.
    std::memcpy(const_cast<std::byte*>(r->host.data()) + (dst - base), src.data(), src.size());
    return Status::ok();
  }
  return memory_.copy_to_device(dst, src);
}

Status SimDeviceCompute::copy_to_device(DevicePtr dst, std::span<const std::byte> src) {
  return write(dst, src, "cudaMemcpy");
}

Status SimDeviceCompute::copy_to_host(std::span<std::byte> dst, DevicePtr src) { return read(src, dst, "cudaMemcpy"); }

Status SimDeviceCompute::copy_to_host_strided(std::span<std::byte> dst, DevicePtr src, uint64_t row_bytes,
                                              uint64_t src_pitch_bytes) {
  const char* call = "cudaMemcpy2D";
  ENGRAM_RETURN_IF_ERROR(check_strided_copy(dst.size(), row_bytes, src_pitch_bytes, rank_));
  ENGRAM_RETURN_IF_ERROR(alive(call));
  if (dst.empty()) return Status::ok();
  const uint64_t rows = dst.size() / row_bytes;
  const uint64_t span_bytes = (rows - 1) * src_pitch_bytes + row_bytes;
  DevicePtr base = 0;
  std::optional<SharedView> view;
  if (registered(src, span_bytes, &base) == nullptr) {
    // One check of the whole span, as the driver's; then the rows.
    ENGRAM_ASSIGN_OR_RETURN(view, memory_.shared_view(src, span_bytes));
  }
  for (uint64_t k = 0; k < rows; ++k) {
    std::span<std::byte> row = dst.subspan(k * row_bytes, row_bytes);
    if (view) std::memcpy(row.data(), view->data->data() + view->data_offset + k * src_pitch_bytes, row_bytes);
    else ENGRAM_RETURN_IF_ERROR(read(src + k * src_pitch_bytes, row, call));
  }
  return Status::ok();
}

Status SimDeviceCompute::copy_async(DevicePtr dst, DevicePtr src, uint64_t bytes, StreamRef) {
  std::vector<std::byte> buffer(bytes);
  ENGRAM_RETURN_IF_ERROR(read(src, buffer, "cudaMemcpyAsync"));
  return write(dst, buffer, "cudaMemcpyAsync");
}

Status SimDeviceCompute::fill_async(DevicePtr dst, uint8_t value, uint64_t bytes, StreamRef) {
  DevicePtr base = 0;
  if (value == 0 && bytes > 0 && registered(dst, bytes, &base) == nullptr) {
    // Zeros in device memory drop its pages: the collective lookup zeroes
    // a group's worth of rows per rank and writes only the rows it owns.
    ENGRAM_RETURN_IF_ERROR(alive("cudaMemsetAsync"));
    return memory_.zero(dst, bytes);
  }
  std::vector<std::byte> buffer(bytes, static_cast<std::byte>(value));
  return write(dst, buffer, "cudaMemsetAsync");
}

Status SimDeviceCompute::write_shared(DevicePtr dst, const SharedBytes& data, const char* call) {
  ENGRAM_RETURN_IF_ERROR(alive(call));
  if (data->empty()) return Status::ok();
  DevicePtr base = 0;
  if (registered(dst, data->size(), &base) != nullptr) return write(dst, *data, call);
  return memory_.copy_to_device_shared(dst, data);
}

Status SimDeviceCompute::for_each_written(DevicePtr src, uint64_t bytes, const char* call,
                                          const std::function<void(uint64_t, std::span<const std::byte>)>& fn) {
  ENGRAM_RETURN_IF_ERROR(alive(call));
  if (bytes == 0) return Status::ok();
  DevicePtr base = 0;
  if (const Registration* r = registered(src, bytes, &base)) {
    fn(0, r->host.subspan(src - base, bytes));
    return Status::ok();
  }
  return memory_.for_each_written(src, bytes, fn);
}

Status SimDeviceCompute::gather(const DeviceGather& a, StreamRef) {
  const char* call = a.shard_count > 0 ? "gather_peer" : a.zero_missing ? "gather_range" : "gather_owned";
  ENGRAM_RETURN_IF_ERROR(check_gather(a, rank_, prepared_ids_max_));
  if (a.tokens == 0) return Status::ok();
  const bool window = a.head_begin != 0 || a.head_count != a.ids_per_token;
  const int64_t slots = a.tokens * a.head_count;
  const TableSpec table = row_decode_spec(a.layout);
  const uint64_t row_bytes = a.layout.row_bytes;
  if (a.shard_count == 0 && !window && a.range_first_row >= 0 && a.host_rows == nullptr) {
    // Device rows over every head (the collective path) go by the world's
    // index of ids, not a scan of every slot; a zero_missing gather first
    // zeroes its output (which drops the pages), as the kernel writes a
    // zero row for each id it does not own.
    DevicePtr base = 0;
    if (a.zero_missing && registered(a.out, static_cast<uint64_t>(slots) * a.layout.dim * 2, &base) == nullptr) {
      ENGRAM_RETURN_IF_ERROR(alive(call));
      ENGRAM_RETURN_IF_ERROR(memory_.zero(a.out, static_cast<uint64_t>(slots) * a.layout.dim * 2));
      DeviceGather owned = a;
      owned.zero_missing = false;
      ENGRAM_ASSIGN_OR_RETURN(bool done, gather_owned_from_index(owned, call));
      if (done) return Status::ok();
    } else if (!a.zero_missing) {
      ENGRAM_ASSIGN_OR_RETURN(bool done, gather_owned_from_index(a, call));
      if (done) return Status::ok();
    }
  }
  // The ids are read a block of tokens at a time: the collective lookup
  // gathers over every member's ids, and one vector of them all per call
  // (freed, then outgrown by the next) fragmented the emulator's heap.
  const int64_t block_tokens = std::max<int64_t>(1, 8192 / a.ids_per_token);
  std::vector<int64_t> ids;
  int64_t block_first = -1;  // the first token of the block in `ids`
  std::vector<int64_t> starts;
  std::vector<DevicePtr> bases;
  if (a.shard_count > 0) {
    starts.resize(static_cast<size_t>(a.shard_count) + 1);
    bases.resize(static_cast<size_t>(a.shard_count));
    ENGRAM_RETURN_IF_ERROR(read(a.shard_starts, std::as_writable_bytes(std::span(starts)), call));
    ENGRAM_RETURN_IF_ERROR(read(a.shard_bases, std::as_writable_bytes(std::span(bases)), call));
  }
  const size_t dim = static_cast<size_t>(a.layout.dim);
  std::vector<std::byte> row(table.row_bytes());
  std::vector<uint16_t> values(dim);
  for (int64_t slot = 0; slot < slots; ++slot) {
    const int64_t token = slot / a.head_count;
    if (block_first < 0 || token >= block_first + block_tokens) {
      block_first = token;
      ids.resize(static_cast<size_t>(std::min(block_tokens, a.tokens - token) * a.ids_per_token));
      ENGRAM_RETURN_IF_ERROR(read(a.ids + static_cast<uint64_t>(token * a.ids_per_token) * 8,
                                  std::as_writable_bytes(std::span(ids)), call));
    }
    const int64_t id =
        ids[static_cast<size_t>((token - block_first) * a.ids_per_token + a.head_begin + slot % a.head_count)];
    DevicePtr at = 0;
    if (a.shard_count > 0) {
      if (id >= 0 && id < starts.back()) {
        // The owner is the last shard whose start <= id (binary search, as the kernel does).
        const auto owner = std::upper_bound(starts.begin(), starts.end() - 1, id) - starts.begin() - 1;
        at = bases[static_cast<size_t>(owner)] + static_cast<uint64_t>(id - starts[static_cast<size_t>(owner)]) * row_bytes;
      }
    } else if (id >= a.range_first_row && id < a.range_first_row + a.range_row_count) {
      at = a.range_base + static_cast<uint64_t>(id - a.range_first_row) * row_bytes;
    }
    const DevicePtr dst = a.out + static_cast<uint64_t>(slot) * dim * 2;
    if (at == 0) {
      if (!a.zero_missing) continue;
      std::fill(values.begin(), values.end(), uint16_t{0});
    } else {
      ENGRAM_RETURN_IF_ERROR(read(at, row, call));
      kernels::row_reference(table, row, values);
    }
    ENGRAM_RETURN_IF_ERROR(write(dst, std::as_bytes(std::span(values)), call));
  }
  return Status::ok();
}

Result<bool> SimDeviceCompute::gather_owned_from_index(const DeviceGather& a, const char* call) {
  ENGRAM_CHECK(a.shard_count == 0 && !a.zero_missing && a.head_begin == 0 && a.head_count == a.ids_per_token);
  ENGRAM_CHECK(a.range_first_row >= 0);  // the index holds no negative ids
  const uint64_t slots = static_cast<uint64_t>(a.tokens) * static_cast<uint64_t>(a.ids_per_token);
  DevicePtr base = 0;
  if (registered(a.ids, slots * 8, &base) != nullptr) return false;
  ENGRAM_ASSIGN_OR_RETURN(std::optional<SharedView> view, memory_.shared_view(a.ids, slots * 8));
  if (!view || view->data_offset % 8 != 0) return false;
  const auto sorted = memory_.world().sorted_ids(view->data);
  const uint64_t first_word = view->data_offset / 8;
  // Ids in [first, first + count), by value then word: writes land in other
  // slots than a scan's order would visit them, but each slot once, alike.
  const int64_t first = a.range_first_row, end = a.range_first_row + a.range_row_count;
  auto lo = std::lower_bound(sorted->begin(), sorted->end(), std::pair<int64_t, uint32_t>{first, 0});
  auto hi = std::lower_bound(lo, sorted->end(), std::pair<int64_t, uint32_t>{end, 0});
  const TableSpec table = row_decode_spec(a.layout);
  const size_t dim = static_cast<size_t>(a.layout.dim);
  std::vector<std::byte> row(table.row_bytes());
  std::vector<uint16_t> values(dim);
  for (auto it = lo; it != hi; ++it) {
    if (it->second < first_word || it->second >= first_word + slots) continue;
    const uint64_t slot = it->second - first_word;
    ENGRAM_RETURN_IF_ERROR(read(a.range_base + static_cast<uint64_t>(it->first - first) * a.layout.row_bytes, row, call));
    kernels::row_reference(table, row, values);
    ENGRAM_RETURN_IF_ERROR(write(a.out + slot * dim * 2, std::as_bytes(std::span(values)), call));
  }
  return true;
}

std::string SimDeviceCompute::table_rows_key(const TableSpec& table, uint64_t seed, int64_t first_row, int64_t rows) {
  // What fill_table_rows's bytes depend on.
  return fmt::format("table rows: seed {} layer {} format {} dim {} rows [{}, {})", seed, table.layer_id,
                     static_cast<int>(table.row_format), table.dim, first_row, first_row + rows);
}

Status SimDeviceCompute::fill_table_rows(DevicePtr dst, const TableSpec& table, uint64_t seed, int64_t first_row,
                                         int64_t rows, StreamRef) {
  if (first_row < 0 || rows < 0 || first_row + rows > table.row_count()) {
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("fill_table_rows: rows [{}, {}) are not inside the table's {} rows", first_row,
                              first_row + rows, table.row_count()),
                  {rank_, -1, "fill"});
  }
  const uint64_t row_bytes = table.row_bytes();
  // Every replica of a shard fills the same rows: made once a run and
  // shared copy-on-write (at 128 NVLink domains, 128 replicas of each).
  const uint64_t bytes = static_cast<uint64_t>(rows) * row_bytes;
  if (auto shared = memory_.world().shared_content(
          table_rows_key(table, seed, first_row, rows), bytes, [&](std::span<std::byte> out) { engram::fill_table_rows(table, seed, first_row, out); })) {
    return write_shared(dst, shared, "fill_table_rows");
  }
  // Too large to keep: in pieces, so a large shard never needs one host
  // buffer of its size.
  const int64_t rows_per_piece = std::max<int64_t>(1, static_cast<int64_t>((8ull << 20) / row_bytes));
  std::vector<std::byte> piece;
  for (int64_t done = 0; done < rows; done += rows_per_piece) {
    const int64_t n = std::min(rows_per_piece, rows - done);
    piece.resize(static_cast<size_t>(n) * row_bytes);
    engram::fill_table_rows(table, seed, first_row + done, piece);
    ENGRAM_RETURN_IF_ERROR(write(dst + static_cast<uint64_t>(done) * row_bytes, piece, "fill_table_rows"));
  }
  return Status::ok();
}

struct SimDeviceCompute::RequestStateCopy {
  std::vector<int64_t> histories, pending, pending_counts;
  uint64_t error = kNoDeviceHashError;
  kernels::RequestStateHost host() {
    return kernels::RequestStateHost{static_cast<int>(pending_counts.size()),
                                     pending_counts.empty() ? 0 : static_cast<int64_t>(pending.size() / pending_counts.size()),
                                     histories, pending, pending_counts, &error};
  }
};

namespace {

template <typename T>
std::span<std::byte> bytes_of(std::vector<T>& v) {
  return std::as_writable_bytes(std::span(v));
}

}  // namespace

Status SimDeviceCompute::read_request_state(const DeviceRequestState& st, const char* call, RequestStateCopy& c) {
  // The heads buffer must hold this hasher's heads: a stale or partial
  // upload would hash by other primes on a GPU.
  const std::vector<DeviceHashHead> want = device_hash_heads(*st.hasher);
  std::vector<DeviceHashHead> heads(want.size());
  ENGRAM_RETURN_IF_ERROR(read(st.heads, bytes_of(heads), call));
  if (std::memcmp(heads.data(), want.data(), want.size() * sizeof(DeviceHashHead)) != 0)
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("{}: the heads buffer at {:#x} does not hold the hasher's {} heads; upload "
                              "device_hash_heads(hasher) when the state is made", call, st.heads, want.size()),
                  {rank_, -1, "hash requests"});
  const auto slots = static_cast<size_t>(st.slot_count);
  c.histories.resize(2 * slots * static_cast<size_t>(st.hasher->history_length()));  // two buffers
  c.pending.resize(slots * static_cast<size_t>(st.verify_tokens_max));
  c.pending_counts.resize(slots);
  ENGRAM_RETURN_IF_ERROR(read(st.histories, bytes_of(c.histories), call));
  ENGRAM_RETURN_IF_ERROR(read(st.pending, bytes_of(c.pending), call));
  ENGRAM_RETURN_IF_ERROR(read(st.pending_counts, bytes_of(c.pending_counts), call));
  return read(st.error, std::as_writable_bytes(std::span(&c.error, 1)), call);
}

Status SimDeviceCompute::write_request_state(const DeviceRequestState& st, const char* call, RequestStateCopy& c) {
  ENGRAM_RETURN_IF_ERROR(write(st.histories, std::as_bytes(std::span(c.histories)), call));
  ENGRAM_RETURN_IF_ERROR(write(st.pending, std::as_bytes(std::span(c.pending)), call));
  ENGRAM_RETURN_IF_ERROR(write(st.pending_counts, std::as_bytes(std::span(c.pending_counts)), call));
  return write(st.error, std::as_bytes(std::span(&c.error, 1)), call);
}

Status SimDeviceCompute::hash_requests(const DeviceRequestHash& a, StreamRef) {
  const char* call = "hash_requests";
  if (Status bad = check_request_hash(a); !bad.is_ok()) return std::move(bad).with_rank(rank_);
  const TableHasher& h = *a.state.hasher;
  RequestStateCopy state;
  ENGRAM_RETURN_IF_ERROR(read_request_state(a.state, call, state));
  int64_t header[2] = {};
  ENGRAM_RETURN_IF_ERROR(read(a.header, std::as_writable_bytes(std::span(header)), call));
  std::vector<DeviceRunWords> runs(static_cast<size_t>(a.state.slot_count));
  ENGRAM_RETURN_IF_ERROR(read(a.runs, bytes_of(runs), call));
  std::vector<int64_t> tokens(static_cast<size_t>(a.token_count));
  ENGRAM_RETURN_IF_ERROR(read(a.tokens, bytes_of(tokens), call));
  std::vector<int64_t> row_ids(tokens.size() * static_cast<size_t>(h.head_count()));
  kernels::request_hash_reference(h, a.verify, tokens, header, runs, state.host(), row_ids);
  ENGRAM_RETURN_IF_ERROR(write(a.row_ids, std::as_bytes(std::span(row_ids)), call));
  return write_request_state(a.state, call, state);
}

Status SimDeviceCompute::commit_requests(const DeviceRequestCommit& a, StreamRef) {
  const char* call = "commit_requests";
  if (Status bad = check_request_commit(a); !bad.is_ok()) return std::move(bad).with_rank(rank_);
  RequestStateCopy state;
  ENGRAM_RETURN_IF_ERROR(read_request_state(a.state, call, state));
  int64_t header[2] = {};
  ENGRAM_RETURN_IF_ERROR(read(a.header, std::as_writable_bytes(std::span(header)), call));
  std::vector<DeviceCommitWords> commits(static_cast<size_t>(a.state.slot_count));
  ENGRAM_RETURN_IF_ERROR(read(a.commits, bytes_of(commits), call));
  kernels::request_commit_reference(*a.state.hasher, header, commits, state.host());
  return write_request_state(a.state, call, state);
}

void SimDeviceCompute::release_process() {
  for (const auto& [address, r] : registrations_) context_.ledger().remove(ResourceKind::kHostRegistration, r.ledger_id);
  registrations_.clear();
  allocations_.clear();
}

Status SimDeviceCompute::synchronize(StreamRef) { return alive("cudaStreamSynchronize"); }

namespace {

class SimDeviceGraph final : public DeviceGraph {
 public:
  explicit SimDeviceGraph(std::function<Status(StreamRef)> enqueue) : enqueue_(std::move(enqueue)) {}
  Status replay() override { return enqueue_(StreamRef{}); }
  Result<std::vector<double>> time(int warmup, int replays) override {
    ENGRAM_CHECK(warmup >= 0 && replays >= 1);
    for (int i = 0; i < warmup; ++i) ENGRAM_RETURN_IF_ERROR(enqueue_(StreamRef{}));
    std::vector<double> us;
    for (int i = 0; i < replays; ++i) {
      // Wall time of the CPU rules: a figure for the report, never for a trace.
      const auto start = std::chrono::steady_clock::now();
      ENGRAM_RETURN_IF_ERROR(enqueue_(StreamRef{}));
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    }
    return us;
  }

 private:
  std::function<Status(StreamRef)> enqueue_;
};

}  // namespace

Result<std::unique_ptr<DeviceGraph>> SimDeviceCompute::capture(const std::function<Status(StreamRef)>& enqueue) {
  ENGRAM_RETURN_IF_ERROR(alive("cudaStreamBeginCapture"));
  return std::unique_ptr<DeviceGraph>(new SimDeviceGraph(enqueue));
}

Result<std::unique_ptr<DeviceCollectives>> SimDeviceCompute::connect(Collectives& bootstrap) {
  ENGRAM_RETURN_IF_ERROR(alive("ncclCommInitRank"));
  bool some_gpu_shared = false;
  for (const HostSpec& host : context_.hosts()) some_gpu_shared |= host.ranks_per_gpu > 1;
  if (!some_gpu_shared) {
    // NCCL's init is a collective over the group: so is this barrier.
    ENGRAM_RETURN_IF_ERROR(bootstrap.barrier());
    return std::unique_ptr<DeviceCollectives>(new SimDeviceCollectives(*this, bootstrap));
  }
  // As NCCL does (ncclInvalidUsage, "Duplicate GPU detected"): every member
  // refuses a communicator with two ranks on one GPU. Checked only in worlds
  // where ranks share GPUs, so large worlds pay nothing.
  const int32_t mine = rank_;
  std::vector<int32_t> members(static_cast<size_t>(bootstrap.size()));
  ENGRAM_RETURN_IF_ERROR(bootstrap.all_gather(std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(std::span(members))));
  std::map<std::pair<int, int>, int> first_on_gpu;
  for (int32_t member : members) {
    const RankPlace& p = context_.place(member);
    auto [it, inserted] = first_on_gpu.try_emplace({p.host, p.gpu}, member);
    if (inserted) continue;
    return Status(ErrorCode::kFailedPrecondition,
                  fmt::format("ncclCommInitRank: ranks {} and {} of this communicator are both on GPU {} of host {}; "
                              "NCCL puts one rank of a communicator on a GPU (ncclInvalidUsage: Duplicate GPU "
                              "detected); give each rank a GPU of its own (ranks_per_gpu: 1)",
                              it->second, member, p.gpu, context_.host_of(member).name),
                  {rank_, member == rank_ ? it->second : member, "connect"});
  }
  return std::unique_ptr<DeviceCollectives>(new SimDeviceCollectives(*this, bootstrap));
}

}  // namespace engram::sim
