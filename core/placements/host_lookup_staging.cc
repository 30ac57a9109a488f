#include "core/placements/host_lookup_staging.h"

#include <algorithm>

namespace engram {

Result<HostLookupStaging> HostLookupStaging::make(DeviceCompute& compute, const ModelSpec& model, int64_t tokens) {
  HostLookupStaging staging;
  for (const TableSpec& t : model.tables) {
    staging.heads_max_ = std::max(staging.heads_max_, t.head_count());
    staging.dim_max_ = std::max(staging.dim_max_, t.dim);
  }
  ENGRAM_RETURN_IF_ERROR(staging.reserve(compute, std::max<int64_t>(tokens, 1)));
  return staging;
}

Status HostLookupStaging::reserve(DeviceCompute& compute, int64_t tokens) {
  if (tokens <= tokens_) return Status::ok();
  ENGRAM_RETURN_IF_ERROR(release(compute));
  const uint64_t ids = static_cast<uint64_t>(tokens) * static_cast<uint64_t>(heads_max_);
  ENGRAM_ASSIGN_OR_RETURN(ids_, compute.allocate(ids * 8));
  auto out = compute.allocate(ids * static_cast<uint64_t>(dim_max_) * 2);
  if (!out.is_ok()) {
    release(compute).ignore();
    return std::move(out).take_status();
  }
  out_ = *out;
  tokens_ = tokens;
  return Status::ok();
}

Status HostLookupStaging::release(DeviceCompute& compute) {
  Status first;
  for (DevicePtr* p : {&ids_, &out_}) {
    if (*p == 0) continue;
    Status freed = compute.free(*p);
    if (first.is_ok()) first = std::move(freed);
    *p = 0;
  }
  tokens_ = 0;
  return first;
}

Status HostLookupStaging::run(DeviceCompute& compute, const LookupRequest& request, int world_rank,
                              const DeviceLookup& device_lookup) {
  const Status shape = check_request_shape(request, world_rank);
  if (!shape.is_ok() && (request.table == nullptr || request.tokens_per_rank_max <= 0)) return shape;
  const int64_t tokens = shape.is_ok() ? request.token_count() : 0;
  const Status slot = shape.is_ok() ? check_slot(tokens, request.tokens_per_rank_max, world_rank) : shape;
  DeviceLookupRequest d;
  d.table = request.table;
  d.tokens = slot.is_ok() ? tokens : 0;
  d.tokens_per_rank_max = request.tokens_per_rank_max;
  d.contribute = slot.is_ok() && !request.table_unknown;
  d.table_unknown = request.table_unknown;
  d.sequence_parallel_shards = request.sequence_parallel_shards;
  if (d.contribute) {
    ENGRAM_RETURN_IF_ERROR(reserve(compute, tokens).with_context(world_rank, -1, "lookup"));
    d.row_ids = ids_;
    d.output = out_;
    if (tokens > 0) {
      ENGRAM_RETURN_IF_ERROR(compute.copy_to_device(ids_, std::as_bytes(request.row_ids))
                                 .with_context(world_rank, -1, "lookup"));
    }
  }
  const Status looked = device_lookup(d);
  ENGRAM_RETURN_IF_ERROR(compute.synchronize(d.stream).with_context(world_rank, -1, "lookup"));
  if (!looked.is_ok()) return looked;
  ENGRAM_RETURN_IF_ERROR(slot);
  if (d.contribute && tokens > 0) {
    ENGRAM_RETURN_IF_ERROR(compute.copy_to_host(std::as_writable_bytes(request.output), out_)
                               .with_context(world_rank, -1, "lookup"));
  }
  return Status::ok();
}

}  // namespace engram
