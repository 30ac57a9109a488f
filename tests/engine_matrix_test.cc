// vLLM's test_engram_table_shared_across_dp_replicas matrix
// (tests/distributed/test_engram_dp_shard.py: (tp, dp, sp) in {(1,4,F),
// (2,2,F), (2,2,T)}, heads {8, 7}, token loads (8,8,8,8), (7,0,5,1),
// (7,7,7,7) with replica 1 all DEAD) planned by each engine's profile and run
// on the emulator, every lookup bitwise against the CPU reference decoding
// scale bytes as that engine does. vLLM's device layout (device_head_sharded)
// is in engine_profile_head_sharded_test.cc.
#include <gtest/gtest.h>

#include "tests/tp_matrix_emulator.h"

namespace engram {
namespace {

// Under vLLM: the shared /dev/shm copy, the fallback to DP head sharding
// where /dev/shm is small, and DP head sharding where dp_shared_memory is
// off (engramlab plans host_private there: vllm/model_executor/layers/engram/
// common/engram_parallel.py shards over the node-local Engram DP group).
TEST(EngineMatrix, VllmHostLayoutsOnTheEmulator) {
  const auto cases = testing::tp_matrix_cases_of_engine(
      "vllm", {{"host_shared", "190GiB", "cpu_offload: true"},
               {"host_head_sharded", "64MiB", "cpu_offload: true"},
               {"host_head_sharded", "190GiB", "cpu_offload: true, dp_shared_memory: false"}});
  ASSERT_EQ(cases.size(), 18u);
  testing::run_tp_matrix_on_emulator(cases);
}

// Under SGLang: row shards on the device and its private host layout, each
// lookup decoded by SGLang's scale-byte rule (byte 0 -> 2^-127, 255 -> NaN).
TEST(EngineMatrix, SglangLayoutsOnTheEmulatorDecodeBySglangsRule) {
  const auto cases = testing::tp_matrix_cases_of_engine(
      "sglang", {{"device_collective", "64MiB", "cpu_offload: false"}, {"sglang_private", "64MiB", "host_layout: per_rank"}});
  ASSERT_EQ(cases.size(), 12u);
  testing::run_tp_matrix_on_emulator(cases);
}

}  // namespace
}  // namespace engram
