#include "core/exchange/shared_device_buffer.h"

#include <fmt/format.h>

namespace engram {

Result<SharedDeviceBuffer> SharedDeviceBuffer::create(RankBackend& backend, Collectives& group,
                                                      uint64_t bytes_per_rank) {
  ENGRAM_ASSIGN_OR_RETURN(SharedMapping mapping, exchange_shareable_handles(backend, group, bytes_per_rank));
  return SharedDeviceBuffer(backend, std::move(mapping), bytes_per_rank);
}

Status SharedDeviceBuffer::check(int group_rank, uint64_t offset, uint64_t length, const char* step) const {
  if (group_rank < 0 || group_rank >= group_size())
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("shared buffer: group rank {} is outside [0, {})", group_rank, group_size()),
                  {backend_->world_rank, -1, step});
  if (offset > bytes_per_rank_ || length > bytes_per_rank_ - offset)
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("shared buffer: [{}, {}) is outside the {} bytes each rank shares", offset,
                              offset + length, bytes_per_rank_),
                  {backend_->world_rank, mapping_.world_rank_of(group_rank), step});
  return Status::ok();
}

Status SharedDeviceBuffer::write(int group_rank, uint64_t offset, std::span<const std::byte> bytes) {
  ENGRAM_RETURN_IF_ERROR(check(group_rank, offset, bytes.size(), "write"));
  return backend_->device->copy_to_device(peer(group_rank) + offset, bytes);
}

Status SharedDeviceBuffer::read(int group_rank, uint64_t offset, std::span<std::byte> bytes) const {
  ENGRAM_RETURN_IF_ERROR(check(group_rank, offset, bytes.size(), "read"));
  return backend_->device->copy_from_device(bytes, peer(group_rank) + offset);
}

}  // namespace engram
