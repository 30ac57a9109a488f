// The emulated CUDA driver against the real one, call by call, on this GPU
// machine's entry (the H200 VM: FABRIC attribute set, no IMEX channel): the
// same VMM sequence (tests/emulated_rank_worker_main.cc `trace`) runs once over
// the real libcuda.so.1 and once over the emulated one with a world of this
// host, and every line (device name, attributes, granularity, each call's
// code) must be the same. Skips visibly without a GPU or the emulated driver.
#include <gtest/gtest.h>

#include <sstream>

#include "backends/cuda/cuda_driver.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/process_run.h"

#ifdef ENGRAM_EMULATED_DRIVER_LIB_DIR
#include "tests/emulated_driver_world.h"
#endif

namespace engram {
namespace {

TEST(EmulatedDriverAgreement, TheH200EntryAnswersEveryCallAsTheRealDriver) {
#ifndef ENGRAM_EMULATED_DRIVER_LIB_DIR
  GTEST_SKIP() << "the emulated CUDA driver is not built here";
#else
  const cuda::GpuPresence gpus = cuda::gpu_presence();
  if (gpus.count == 0) GTEST_SKIP() << "no GPU: " << gpus.reason;
  const std::string worker = std::string(ENGRAM_BINARY_DIR) + "/tests/emulated_rank_worker trace";
  // Trace lines only (stdout): the emulated driver's stderr words differ by design.
  const auto real = testing::run("(CUDA_VISIBLE_DEVICES=0 " + worker + ") 2>/dev/null");
  auto world = testing::make_emulated_world(R"(
hosts:
  - {name: h200-vm, gpus: 1, gpu_model: H200, fabric_attribute: true, imex_channel: false}
layout: {tp: 1, dp: 1}
)");
  ASSERT_TRUE(world.is_ok()) << world.status().to_string();
  const auto emulated = testing::run("(RANK=0 " + testing::emulated_driver_env(**world) + " " + worker + ") 2>/dev/null");
  auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    // The emulated driver's own diagnostics (its stderr, which the worker
    // may fold into stdout) are not answers of a call.
    for (std::string line; std::getline(in, line);)
      if (line.rfind("engramlab emulated driver: ", 0) != 0) out.push_back(line);
    return out;
  };
  const auto r = lines(real.output);
  const auto e = lines(emulated.output);
  ASSERT_GE(r.size(), 9u) << real.output;
  EXPECT_EQ(r, e) << "real:\n" << real.output << "\nemulated:\n" << emulated.output;
#endif
}

}  // namespace
}  // namespace engram
