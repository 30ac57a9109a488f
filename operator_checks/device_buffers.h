// Device allocations of one rank's checks and timings (the acceptance test,
// the bench), given back when the owner goes, on every path: a failed step
// leaves nothing allocated.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/backend/device_compute.h"
#include "core/base/status.h"

namespace engram::operator_checks {

class DeviceBuffers {
 public:
  explicit DeviceBuffers(DeviceCompute& compute) : compute_(compute) {}
  ~DeviceBuffers() {
    for (DevicePtr p : owned_) compute_.free(p).ignore();
  }
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  // At least one byte, so an empty request still has an address.
  Result<DevicePtr> make(uint64_t bytes) {
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr p, compute_.allocate(std::max<uint64_t>(bytes, 1)));
    owned_.push_back(p);
    return p;
  }

 private:
  DeviceCompute& compute_;
  std::vector<DevicePtr> owned_;
};

}  // namespace engram::operator_checks
