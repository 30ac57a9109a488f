// Owners of what a DeviceMemory hands out: an allocation (created or
// imported), a reserved address range, and a mapping. Each gives its
// resource back exactly once: by its explicit call (release(), free(),
// unmap(): returns the backend's error, with its step) or else in its
// destructor (errors dropped: a failure path, or a peer that is gone).
// Moving transfers ownership; moving onto an owner gives back what it held.
//
// Teardown order (docs/design.md section 5) is unmap, then free the range and
// release the allocation. An aggregate that declares its owners in the order
// allocation, range, mapping gets that order from C++ member destruction, on
// every failure path too (MappedAllocation below).
#pragma once

#include <cstdint>
#include <utility>

#include "core/backend/device_memory.h"
#include "core/base/status.h"

namespace engram {

namespace device_owner {

// What the three owners share: the device, the value it handed out (a
// handle or an address), its size, and the one call that gives it back.
template <Status (*kGiveBack)(DeviceMemory& device, uint64_t value, uint64_t bytes)>
class Owned {
 public:
  Owned() = default;
  Owned(Owned&& other) noexcept
      : device_(std::exchange(other.device_, nullptr)),
        value_(std::exchange(other.value_, 0)),
        bytes_(std::exchange(other.bytes_, 0)) {}
  Owned& operator=(Owned&& other) noexcept {
    if (this != &other) {
      give_back().ignore();
      device_ = std::exchange(other.device_, nullptr);
      value_ = std::exchange(other.value_, 0);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() { give_back().ignore(); }

  bool valid() const { return device_ != nullptr; }
  uint64_t bytes() const { return bytes_; }

 protected:
  // Only the owners' own factories take ownership of what the device handed out.
  Owned(DeviceMemory& device, uint64_t value, uint64_t bytes) : device_(&device), value_(value), bytes_(bytes) {}
  uint64_t value() const { return value_; }
  DeviceMemory& device() const {
    ENGRAM_CHECK(device_ != nullptr);
    return *device_;
  }
  // Ok when nothing is held.
  Status give_back() {
    if (device_ == nullptr) return Status::ok();
    DeviceMemory& device = *std::exchange(device_, nullptr);
    return kGiveBack(device, std::exchange(value_, 0), std::exchange(bytes_, 0));
  }

 private:
  DeviceMemory* device_ = nullptr;
  uint64_t value_ = 0;
  uint64_t bytes_ = 0;
};

Status release_allocation(DeviceMemory& device, uint64_t handle, uint64_t bytes);
Status free_range(DeviceMemory& device, uint64_t address, uint64_t bytes);
Status unmap_range(DeviceMemory& device, uint64_t address, uint64_t bytes);

}  // namespace device_owner

class DeviceAllocation : public device_owner::Owned<device_owner::release_allocation> {
 public:
  DeviceAllocation() = default;
  // `bytes` a multiple of the granularity (the backend checks it).
  static Result<DeviceAllocation> create(DeviceMemory& device, uint64_t bytes, HandleType exportable_as);
  // Does not close handle.fd (the caller does, import or not).
  static Result<DeviceAllocation> import(DeviceMemory& device, const ShareableHandle& handle, uint64_t bytes);
  AllocationHandle handle() const { return value(); }
  Status release() { return give_back(); }

 private:
  using Owned::Owned;  // protected, as in Owned: only the factories above
};

class DeviceRange : public device_owner::Owned<device_owner::free_range> {
 public:
  DeviceRange() = default;
  static Result<DeviceRange> reserve(DeviceMemory& device, uint64_t bytes);
  DevicePtr address() const { return value(); }
  // Every mapping inside must be gone first.
  Status free() { return give_back(); }

 private:
  using Owned::Owned;  // protected, as in Owned: only the factories above
};

class DeviceMapping : public device_owner::Owned<device_owner::unmap_range> {
 public:
  DeviceMapping() = default;
  // Maps `allocation` at [address, address + bytes) (inside a range).
  static Result<DeviceMapping> map(DeviceMemory& device, DevicePtr address, uint64_t bytes,
                                   AllocationHandle allocation);
  DevicePtr address() const { return value(); }
  // Read/write access for this device: without it a real kernel hangs or
  // faults, so every mapping is given access before use.
  Status grant_access();
  Status unmap() { return give_back(); }

 private:
  using Owned::Owned;  // protected, as in Owned: only the factories above
};

// One allocation mapped into a range of its own with access granted: a
// device shard this process owns (created) or a peer's it imported.
class MappedAllocation {
 public:
  MappedAllocation() = default;
  MappedAllocation(MappedAllocation&& other) noexcept = default;
  // Gives back what this one holds, in order, before taking the other's.
  MappedAllocation& operator=(MappedAllocation&& other) noexcept;
  // create, reserve, map, grant access; on failure nothing is left behind.
  static Result<MappedAllocation> create(DeviceMemory& device, uint64_t bytes, HandleType exportable_as);
  // import, reserve, map, grant access; the caller closes handle.fd.
  static Result<MappedAllocation> import(DeviceMemory& device, const ShareableHandle& handle, uint64_t bytes);

  bool valid() const { return mapping_.valid(); }
  DevicePtr address() const { return mapping_.address(); }
  uint64_t bytes() const { return allocation_.bytes(); }
  AllocationHandle allocation() const { return allocation_.handle(); }
  // Unmap, free the range, release; carries on past a failure and returns
  // the first. Ok when nothing is held.
  Status release();

 private:
  static Result<MappedAllocation> map_own_range(DeviceMemory& device, DeviceAllocation allocation);

  // Declaration order is teardown order reversed (see the file comment).
  DeviceAllocation allocation_;
  DeviceRange range_;
  DeviceMapping mapping_;
};

}  // namespace engram
