#include "core/backend/device_resources.h"

namespace engram {
namespace {

Status named(Status status, DeviceStep step) {
  return std::move(status).with_context(-1, -1, device_step_name(step));
}

}  // namespace

namespace device_owner {

Status release_allocation(DeviceMemory& device, uint64_t handle, uint64_t) {
  return named(device.release(handle), DeviceStep::kRelease);
}
Status free_range(DeviceMemory& device, uint64_t address, uint64_t bytes) {
  return named(device.free_reservation(address, bytes), DeviceStep::kFreeReservation);
}
Status unmap_range(DeviceMemory& device, uint64_t address, uint64_t bytes) {
  return named(device.unmap(address, bytes), DeviceStep::kUnmap);
}

}  // namespace device_owner

Result<DeviceAllocation> DeviceAllocation::create(DeviceMemory& device, uint64_t bytes, HandleType exportable_as) {
  auto handle = device.create(bytes, exportable_as);
  if (!handle.is_ok()) return named(std::move(handle).take_status(), DeviceStep::kCreate);
  return DeviceAllocation(device, *handle, bytes);
}

Result<DeviceAllocation> DeviceAllocation::import(DeviceMemory& device, const ShareableHandle& shared,
                                                  uint64_t bytes) {
  auto handle = device.import_handle(shared);
  if (!handle.is_ok()) return named(std::move(handle).take_status(), DeviceStep::kImport);
  return DeviceAllocation(device, *handle, bytes);
}

Result<DeviceRange> DeviceRange::reserve(DeviceMemory& device, uint64_t bytes) {
  auto address = device.reserve(bytes);
  if (!address.is_ok()) return named(std::move(address).take_status(), DeviceStep::kReserve);
  return DeviceRange(device, *address, bytes);
}

Result<DeviceMapping> DeviceMapping::map(DeviceMemory& device, DevicePtr address, uint64_t bytes,
                                         AllocationHandle allocation) {
  Status mapped = device.map(address, bytes, allocation);
  if (!mapped.is_ok()) return named(std::move(mapped), DeviceStep::kMap);
  return DeviceMapping(device, address, bytes);
}

Status DeviceMapping::grant_access() {
  return named(device().set_access(address(), bytes()), DeviceStep::kAccess);
}

// ------------------------------------------------------------ MappedAllocation

Result<MappedAllocation> MappedAllocation::create(DeviceMemory& device, uint64_t bytes, HandleType exportable_as) {
  ENGRAM_ASSIGN_OR_RETURN(DeviceAllocation allocation, DeviceAllocation::create(device, bytes, exportable_as));
  return map_own_range(device, std::move(allocation));
}

Result<MappedAllocation> MappedAllocation::import(DeviceMemory& device, const ShareableHandle& handle,
                                                  uint64_t bytes) {
  ENGRAM_ASSIGN_OR_RETURN(DeviceAllocation allocation, DeviceAllocation::import(device, handle, bytes));
  return map_own_range(device, std::move(allocation));
}

Result<MappedAllocation> MappedAllocation::map_own_range(DeviceMemory& device, DeviceAllocation allocation) {
  MappedAllocation out;
  out.allocation_ = std::move(allocation);
  ENGRAM_ASSIGN_OR_RETURN(out.range_, DeviceRange::reserve(device, out.allocation_.bytes()));
  ENGRAM_ASSIGN_OR_RETURN(out.mapping_, DeviceMapping::map(device, out.range_.address(), out.range_.bytes(),
                                                           out.allocation_.handle()));
  ENGRAM_RETURN_IF_ERROR(out.mapping_.grant_access());  // `out` undoes the rest
  return out;
}

MappedAllocation& MappedAllocation::operator=(MappedAllocation&& other) noexcept {
  if (this == &other) return *this;
  release().ignore();
  allocation_ = std::move(other.allocation_);
  range_ = std::move(other.range_);
  mapping_ = std::move(other.mapping_);
  return *this;
}

Status MappedAllocation::release() {
  Status first = mapping_.unmap();
  Status freed = range_.free();
  if (first.is_ok()) first = std::move(freed);
  Status released = allocation_.release();
  if (first.is_ok()) first = std::move(released);
  return first;
}

}  // namespace engram
