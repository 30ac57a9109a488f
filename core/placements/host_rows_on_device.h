// Host tables the rank's GPU reads (host_shared, host_private,
// host_head_sharded): each table's rows in host memory are registered with
// the rank's DeviceCompute (pinned, mapped, read-only where the driver
// allows) and the device lookup reads them through the device address, as
// the engines read their CPU-offloaded tables. Unregistered before the host
// memory goes, on every path (release(), the destructor).
//
// Two lookups: a rank holding whole tables gathers its own tokens' rows; a
// rank holding one part of each table (host_head_sharded: its heads' rows)
// takes part in the collective over row ranges with its group
// (core/lookup/device_lookup.h), each member serving the rows it holds.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/backend/device_compute.h"
#include "core/lookup/device_lookup.h"
#include "core/placements/private_host_rows.h"

namespace engram {

// The ids a rank's device lookup of host rows handles at most: its slot of
// the first table's heads, every member's slot where it serves its whole
// group (kCollectiveOverRows), plus header words for each of the
// `group_size` members.
int64_t host_lookup_ids_max(const ModelSpec& model, int64_t tokens_per_rank_max, bool serves_group, int group_size);
// The pinned host memory a rank's device lookup of host rows may stage the
// ids and rows in (the CUDA backend's row stager, backends/cuda/host_row_stager.h):
// what a memory limit over the rank is charged with besides its tables.
uint64_t host_lookup_pinned_bytes(const ModelSpec& model, int64_t tokens_per_rank_max, bool serves_group,
                                  int group_size);

class HostRowsOnDevice {
 public:
  enum class Lookup : uint8_t { kWholeTable, kCollectiveOverRows };

  HostRowsOnDevice() = default;
  ~HostRowsOnDevice();  // local clean-up
  HostRowsOnDevice(const HostRowsOnDevice&) = delete;
  HostRowsOnDevice& operator=(const HostRowsOnDevice&) = delete;

  // rows[i]: the bytes of rows ranges[i] of table i. kCollectiveOverRows is
  // collective over `group` (device collectives are set up). Where it fails,
  // what it made is given back before it returns. With `ranks_share_gpus`
  // (PlacementContext) kCollectiveOverRows is not built, since NCCL puts one
  // rank of a communicator on a GPU: built() stays false, unavailable() says
  // why, and the host lookup serves.
  Status build(DeviceCompute& compute, Collectives& group, const ModelSpec& model,
               std::vector<std::span<const std::byte>> rows, std::vector<RowRange> ranges, Lookup lookup,
               int64_t tokens_per_rank_max, bool ranks_share_gpus);

  bool built() const { return compute_ != nullptr; }
  // Why a device lookup that could have been built was not ("" otherwise).
  const std::string& unavailable() const { return unavailable_; }
  Status lookup_device(int table_index, const DeviceLookupRequest& request);

  // Synchronises, unregisters and frees; the first failure, after trying all.
  Status release();

 private:
  struct Table {
    std::span<const std::byte> host;
    RowRange rows;
    DevicePtr device = 0;
  };

  DeviceCompute* compute_ = nullptr;
  Collectives* group_ = nullptr;
  Lookup lookup_ = Lookup::kWholeTable;
  std::vector<Table> tables_;
  std::unique_ptr<DeviceCollectives> comm_;
  CollectiveWorkspace workspace_;
  std::string unavailable_;
};

}  // namespace engram
