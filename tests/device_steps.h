// The same failing DeviceMemory calls, run against any backend: each must
// fail and name the step core/backend/device_memory.h's table gives it. The
// emulator runs them in CI (tests/sim_device_memory_test.cc); the real driver
// on a GPU machine (tests/gpu/cuda_device_steps_test.cc). Only calls that
// fail without harming the device are used (no bogus allocation handles,
// which the driver may dereference).
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "core/backend/device_memory.h"
#include "core/backend/device_resources.h"

namespace engram::testing {

struct DeviceStepCase {
  const char* call;  // what is done wrong, for the failure message
  DeviceStep step;   // the step it must name
  std::function<Status(DeviceMemory&, uint64_t granularity_bytes)> run;
};

inline std::vector<DeviceStepCase> failing_device_calls() {
  return {
      {"create of granularity + 1 bytes", DeviceStep::kCreate,
       [](DeviceMemory& d, uint64_t g) { return d.create(g + 1, HandleType::kPosixFd).status(); }},
      {"import of an fd this process does not have", DeviceStep::kImport,
       [](DeviceMemory& d, uint64_t) {
         ShareableHandle bogus;
         bogus.type = HandleType::kPosixFd;
         bogus.fd = 987;
         return d.import_handle(bogus).status();
       }},
      {"map outside any reserved range", DeviceStep::kMap,
       [](DeviceMemory& d, uint64_t g) {
         auto allocation = DeviceAllocation::create(d, g, HandleType::kPosixFd);
         if (!allocation.is_ok()) return internal_error("set-up: " + allocation.status().to_string());
         return d.map(0, g, allocation->handle());
       }},
      {"access to a reserved range that nothing maps", DeviceStep::kAccess,
       [](DeviceMemory& d, uint64_t g) {
         auto range = DeviceRange::reserve(d, g);
         if (!range.is_ok()) return internal_error("set-up: " + range.status().to_string());
         return d.set_access(range->address(), g);
       }},
      // (Unmapping a reserved range that nothing maps succeeds on the CUDA 13
      // driver of an H200, so the failing unmap is one of address 0.)
      {"unmap of address 0", DeviceStep::kUnmap, [](DeviceMemory& d, uint64_t g) { return d.unmap(0, g); }},
      {"free of a range never reserved", DeviceStep::kFreeReservation,
       [](DeviceMemory& d, uint64_t g) { return d.free_reservation(0, g); }},
      {"close of fd -1", DeviceStep::kCloseFd, [](DeviceMemory& d, uint64_t) { return d.close_fd(-1); }},
      {"copy to device address 0", DeviceStep::kCopyToDevice,
       [](DeviceMemory& d, uint64_t) {
         const std::array<std::byte, 16> bytes{};
         return d.copy_to_device(0, bytes);
       }},
      {"copy from device address 0", DeviceStep::kCopyFromDevice,
       [](DeviceMemory& d, uint64_t) {
         std::array<std::byte, 16> bytes{};
         return d.copy_from_device(bytes, 0);
       }},
  };
}

// Runs every case on `device`; returns the steps seen, in case order, for
// callers that compare two backends.
inline std::vector<std::string> expect_device_steps(DeviceMemory& device, uint64_t granularity_bytes) {
  std::vector<std::string> seen;
  for (const DeviceStepCase& c : failing_device_calls()) {
    const Status s = c.run(device, granularity_bytes);
    EXPECT_FALSE(s.is_ok()) << c.call << " did not fail";
    EXPECT_EQ(s.context().step, device_step_name(c.step)) << c.call << ": " << s.to_string();
    seen.push_back(s.context().step);
  }
  return seen;
}

}  // namespace engram::testing
