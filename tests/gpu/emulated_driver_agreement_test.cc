// The emulated CUDA driver against the real one, call by call, on this GPU
// machine's entry: a world of one host whose GPU model, FABRIC attribute and
// IMEX channel are this machine's (the H200 and H100 VMs: attribute set, no
// channel). The same VMM sequence (tests/emulated_rank_worker_main.cc
// `trace`) runs once over the real libcuda.so.1 and once over the emulated
// one, and every line (attributes, granularity, each call's code) must be
// the same; the device name by the model it stands for (the emulated
// driver names a GPU "NVIDIA <model>", CUDA adds the board: "NVIDIA H100
// 80GB HBM3"). Skips visibly without a GPU, the emulated driver, or an entry
// for this GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>

#include "backends/cuda/cuda_driver.h"
#include "core/model/gpu_models.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/process_run.h"

#ifdef ENGRAM_EMULATED_DRIVER_LIB_DIR
#include "tests/emulated_driver_world.h"
#endif

namespace engram {
namespace {

// "info: name=NVIDIA H100 80GB HBM3 vmm=1 ..." -> the line with the model
// the name stands for ("name=H100"), and that model and the FABRIC attribute.
struct TraceFacts {
  std::string gpu_model;
  bool fabric_attribute = false;
};
std::string by_model(const std::string& line, TraceFacts* facts) {
  static const std::regex info(R"(^info: name=(.*) vmm=(\d) posix_fd=(\d) fabric_attribute=(\d) (.*)$)");
  std::smatch m;
  if (!std::regex_match(line, m, info)) return line;
  const std::string model = gpu_model_of_device_name(m[1].str());
  if (facts != nullptr) *facts = {model, m[4].str() == "1"};
  return "info: name=" + model + " vmm=" + m[2].str() + " posix_fd=" + m[3].str() + " fabric_attribute=" + m[4].str() +
         " " + m[5].str();
}

TEST(EmulatedDriverAgreement, ThisGpusEntryAnswersEveryCallAsTheRealDriver) {
#ifndef ENGRAM_EMULATED_DRIVER_LIB_DIR
  GTEST_SKIP() << "the emulated CUDA driver is not built here";
#else
  const cuda::GpuPresence gpus = cuda::gpu_presence();
  if (gpus.count == 0) GTEST_SKIP() << "no GPU: " << gpus.reason;
  const std::string worker = std::string(ENGRAM_BINARY_DIR) + "/tests/emulated_rank_worker trace";
  // Trace lines only (stdout): the emulated driver's stderr words differ by design.
  const auto real = testing::run("(CUDA_VISIBLE_DEVICES=0 " + worker + ") 2>/dev/null");
  // The emulated driver's own diagnostics (its stderr, which the worker may
  // fold into stdout) are not answers of a call.
  auto lines = [](const std::string& text, TraceFacts* facts) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("engramlab emulated driver: ", 0) != 0) out.push_back(by_model(line, facts));
    return out;
  };
  TraceFacts here;
  const auto r = lines(real.output, &here);
  ASSERT_GE(r.size(), 9u) << real.output;
  ASSERT_FALSE(here.gpu_model.empty()) << "the real trace names no GPU:\n" << real.output;
  if (!is_builtin_gpu_model(here.gpu_model))
    GTEST_SKIP() << "the emulated driver has no entry for this GPU (" << here.gpu_model << ")";
  const bool imex_channel = std::filesystem::exists("/dev/nvidia-caps-imex-channels/channel0");
  auto world = testing::make_emulated_world(fmt::format(
      "hosts:\n  - {{name: gpu-vm, gpus: 1, gpu_model: {}, fabric_attribute: {}, imex_channel: {}}}\n"
      "layout: {{tp: 1, dp: 1}}\n",
      here.gpu_model, here.fabric_attribute, imex_channel));
  ASSERT_TRUE(world.is_ok()) << world.status().to_string();
  const auto emulated = testing::run("(RANK=0 " + testing::emulated_driver_env(**world) + " " + worker + ") 2>/dev/null");
  const auto e = lines(emulated.output, nullptr);
  EXPECT_EQ(r, e) << "real:\n" << real.output << "\nemulated:\n" << emulated.output;
#endif
}

}  // namespace
}  // namespace engram
