// The real driver's half of "both DeviceMemory backends name the same step
// for the same failing call" (tests/device_steps.h): the same calls the
// emulator runs in CI (tests/sim_device_memory_test.cc), on GPU 0.
#include <gtest/gtest.h>

#include "backends/cuda/cuda_device_memory.h"
#include "tests/device_steps.h"
#include "tests/gpu/gpu_test_support.h"

namespace engram::gpu_test {
namespace {

TEST(DeviceSteps, CudaNamesEachFailingCallFromTheTable) {
  ENGRAM_SKIP_WITHOUT_GPUS(1);
  auto memory = cuda::CudaDeviceMemory::open(0);
  ASSERT_TRUE(memory.is_ok()) << memory.status().to_string();
  auto granularity = (*memory)->granularity(HandleType::kPosixFd);
  ASSERT_TRUE(granularity.is_ok()) << granularity.status().to_string();
  auto before = (*memory)->memory_info();
  ASSERT_TRUE(before.is_ok());
  testing::expect_device_steps(**memory, *granularity);
  auto after = (*memory)->memory_info();
  ASSERT_TRUE(after.is_ok());
  EXPECT_EQ(before->first, after->first) << "the failing calls' set-up must give back what it took";
}

}  // namespace
}  // namespace engram::gpu_test
