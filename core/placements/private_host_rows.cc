#include "core/placements/private_host_rows.h"

#include <fmt/format.h>

#include <thread>
#include <vector>

#include "core/base/elapsed.h"
#include "core/base/private_memory.h"
#include "core/model/table_fill.h"
#include "core/placements/host_rows_on_device.h"

namespace engram {
namespace {

class PrivateHostRows final : public PlacementTables {
 public:
  PrivateHostRows(Collectives& group, Collectives& tp_group, LookupHeld lookup_held)
      : group_(group), tp_group_(tp_group), lookup_held_(lookup_held) {}

  ~PrivateHostRows() override { device_.release().ignore(); }  // unregistered before the rows go

  Status build(PlacementContext& context, RowsHeld rows_held, DeviceRowsLookup device_lookup) {
    std::vector<std::span<const std::byte>> spans;
    std::vector<RowRange> ranges;
    const auto fill_start = std::chrono::steady_clock::now();
    for (const TableSpec& spec : context.model.tables) {
      const RowRange rows = rows_held(spec, group_, tp_group_);
      ENGRAM_CHECK(rows.first_row >= 0 && rows.row_count >= 0 && rows.first_row + rows.row_count <= spec.row_count());
      auto memory = PrivateMemory::map(static_cast<uint64_t>(rows.row_count) * spec.row_bytes());
      if (!memory.is_ok())
        return std::move(memory).take_status().with_context(group_.world_rank(), -1, "host table rows");
      const std::span<std::byte> bytes = tables_.emplace_back(std::move(memory).value()).bytes();
      fill_table_rows_parallel(spec, context.fill_seed, rows.first_row, bytes, fill_threads_for(bytes.size()));
      footprint_.host_bytes += bytes.size();
      spans.emplace_back(bytes);
      ranges.push_back(rows);
    }
    footprint_.host_fill_seconds = seconds_since(fill_start);
    if (context.backend.compute == nullptr) return Status::ok();
    if (device_lookup == DeviceRowsLookup::kNone) {
      device_unavailable_ = "SGLang's host layouts look their rows up on the CPU here (nothing is registered with the "
                            "device); use the host lookup";
      return Status::ok();
    }
    if (device_lookup == DeviceRowsLookup::kHeadShards && tp_group_.size() > 1) {
      // Its head shards cover the table only over the TP group and the DP
      // group together; that collective is not built: the host lookup serves.
      device_unavailable_ = fmt::format(
          "host_head_sharded reads its head shards on the device at tp 1 only (this replica has tp {}); use the host "
          "lookup",
          tp_group_.size());
      return Status::ok();
    }
    // A TP slice: the whole table at tp 1 (each rank its own tokens), else
    // the TP group's collective over its slices' rows.
    Collectives& readers = device_lookup == DeviceRowsLookup::kTpSlice ? tp_group_ : group_;
    const bool collective = device_lookup == DeviceRowsLookup::kHeadShards || tp_group_.size() > 1;
    const auto register_start = std::chrono::steady_clock::now();
    Status registered = device_.build(*context.backend.compute, readers, context.model, std::move(spans),
                                      std::move(ranges),
                                      collective ? HostRowsOnDevice::Lookup::kCollectiveOverRows
                                                 : HostRowsOnDevice::Lookup::kWholeTable,
                                      context.tokens_per_rank_max, context.ranks_share_gpus);
    footprint_.device_register_seconds = seconds_since(register_start);
    return registered;
  }

  Status lookup(int table_index, const LookupRequest& request) override {
    return lookup_held_(group_, tp_group_, request, tables_[static_cast<size_t>(table_index)].bytes());
  }

  bool device_lookup_ready() const override { return device_.built(); }

  Status lookup_device(int table_index, const DeviceLookupRequest& request) override {
    if (!device_.built()) {
      return Status(ErrorCode::kFailedPrecondition,
                    !device_unavailable_.empty()    ? device_unavailable_
                    : !device_.unavailable().empty() ? device_.unavailable()
                                                     : "device lookup on a rank without a device (no DeviceCompute)",
                    {group_.world_rank(), -1, "lookup"});
    }
    return device_.lookup_device(table_index, request);
  }

  Status release() override {
    Status first = device_.release();
    tables_.clear();
    return first;
  }

 private:
  Collectives& group_;
  Collectives& tp_group_;
  LookupHeld lookup_held_;
  std::vector<PrivateMemory> tables_;  // per table: the rows held (huge pages where the kernel allows)
  std::string device_unavailable_;              // why there is no device lookup, where it is by design
  HostRowsOnDevice device_;                     // declared last: unregistered before the rows go
};

}  // namespace

int fill_threads_for(uint64_t bytes) {
  // Small tables (tests, the emulator) fill on the caller's thread; a real
  // table (tens of GB) takes every core, as page faults are per thread.
  if (bytes < (256ull << 20)) return 1;
  return static_cast<int>(std::min<unsigned>(32, std::max(1u, std::thread::hardware_concurrency())));
}

Result<std::unique_ptr<PlacementTables>> build_private_host_rows(PlacementContext& context, RowsHeld rows_held,
                                                                 LookupHeld lookup_held,
                                                                 DeviceRowsLookup device_lookup) {
  auto tables = std::make_unique<PrivateHostRows>(context.group, context.tp_group, lookup_held);
  ENGRAM_RETURN_IF_ERROR(tables->build(context, rows_held, device_lookup));
  return std::unique_ptr<PlacementTables>(std::move(tables));
}

}  // namespace engram
