// The list-form handle exchange and the weight-sharing transport on real
// processes under `engramlab launch`, with memfds standing in for GPU memory
// (tests/exchange_worker): real POSIX fds over the real Unix-socket channel,
// every rank's live allocation, mapping and fd counts checked back at their
// baseline (/proc/self/fd) whether the exchange worked or was refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/process_run.h"

namespace {

namespace fs = std::filesystem;

using engram::testing::count;
using engram::testing::ProcessRun;
using engram::testing::run;

class ChunkExchangeLaunch : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/dev/shm/engramlab-chunks-XXXXXX";
    shm_dir_ = ::mkdtemp(templ);
  }
  void TearDown() override { fs::remove_all(shm_dir_); }
  ProcessRun launch(int ranks, const std::string& flags) {
    const std::string job = "chunks" + std::to_string(::getpid()) + "n" + std::to_string(++jobs_);
    return run("ENGRAMLAB_SHM_DIR=" + shm_dir_ + " " + ENGRAM_BINARY_DIR + "/apps/engramlab launch -n " +
               std::to_string(ranks) + " --job-id " + job + " --grace-ms 2000 -- " + ENGRAM_BINARY_DIR +
               "/tests/exchange_worker " + flags);
  }
  std::string shm_dir_;
  int jobs_ = 0;
};

std::string repeated(const std::string& item, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += (i ? "," : "") + item;
  return out;
}

// SGLang's test_handle_roundtrip, POSIX on real processes: 1 and 3 chunks of 2 MiB.
TEST_F(ChunkExchangeLaunch, HandleRoundtripOneAndThreeChunksEveryRankReadsEveryPeers) {
  for (int chunks : {1, 3}) {
    const ProcessRun r = launch(4, "--chunks " + repeated("2097152", chunks));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(count(r.output, "handle posix_fd, chunks per rank " + repeated(std::to_string(chunks), 4) +
                                  ": EXCHANGE OK"),
              4u)
        << r.output;
    EXPECT_EQ(count(r.output, "NOTHING LEFT"), 4u) << r.output;
  }
}

// SGLang's test_register_graph_inputs_follows_widest_input: 20 chunks on odd
// ranks, 1 on even, every span as wide as the widest.
TEST_F(ChunkExchangeLaunch, GraphInputsFollowTheWidestInput) {
  const ProcessRun r = launch(4, "--chunks 2097152 --chunks-on-odd " + repeated("2097152", 20) +
                                     " --span-bytes " + std::to_string(20 * 2097152));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "chunks per rank 1,20,1,20: EXCHANGE OK"), 4u) << r.output;
  EXPECT_EQ(count(r.output, "NOTHING LEFT"), 4u) << r.output;
}

// SGLang's test_default_handle_type_fallback, the "reject both" half on real
// processes (memfd has no FABRIC; --no-posix takes POSIX away).
TEST_F(ChunkExchangeLaunch, WithoutAnyHandleTypeEachRankGetsPlainMemoryOrARefusalSayingWhy) {
  ProcessRun r = launch(2, "--chunks 2097152,2097152 --no-posix --allow-unshared --expect unshared");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "handle none, chunks per rank 2,2: UNSHARED OK (failed_precondition"), 2u) << r.output;
  EXPECT_EQ(count(r.output, "POSIX fd handles are not supported"), 2u) << r.output;
  EXPECT_EQ(count(r.output, "NOTHING LEFT"), 2u) << r.output;
  r = launch(2, "--chunks 2097152 --no-posix --expect refused");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "EXCHANGE REFUSED: failed_precondition"), 2u) << r.output;
  EXPECT_EQ(count(r.output, "NOTHING LEFT"), 2u) << r.output;
}

TEST_F(ChunkExchangeLaunch, WeightSharingEveryRankReadsEveryPeersNamedTensors) {
  const ProcessRun r = launch(4, "--weights");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "WEIGHTS OK"), 4u) << r.output;
  EXPECT_EQ(count(r.output, "NOTHING LEFT"), 4u) << r.output;
}

// A receiver that reaches the exchange late still gets every fd (sends do
// not wait for it), and every rank's fds are back at the baseline.
TEST_F(ChunkExchangeLaunch, ALateReceiverJoinsAndEveryFdIsClosed) {
  const ProcessRun r = launch(3, "--chunks 2097152,2097152 --late-rank 1:80");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "EXCHANGE OK"), 3u) << r.output;
  EXPECT_EQ(count(r.output, "NOTHING LEFT"), 3u) << r.output;
}

struct Refusal {
  const char* flags;
  const char* says;
};

TEST_F(ChunkExchangeLaunch, BadInputIsRefusedOnEveryRankByNameNothingLeftOpen) {
  for (const Refusal& c :
       {Refusal{"--chunks 4194304 --granularity-on-rank 1:4194304",
                "invalid_argument (rank {r}, peer 1, step sizes): handle exchange: rank 1 maps at a granularity of "
                "4194304 bytes, rank 0 at 2097152 bytes"},
        Refusal{"--chunks 2097152 --chunks-on-odd 2097152,3145728",
                "invalid_argument (rank {r}, peer 1, step sizes): handle exchange: rank 1's chunk 1 is 3145728 "
                "bytes, not a positive multiple"},
        Refusal{"--chunks 2097152 --chunks-on-odd 2097152,2097152,2097152 --span-bytes 4194304",
                "invalid_argument (rank {r}, peer 1, step sizes): handle exchange: rank 1's 3 chunks need 6291456 "
                "bytes, more than the span of 4194304 bytes"},
        Refusal{"--chunks 2097152,2097152 --chunks-on-odd 2097152 --expect-chunks 2",
                "invalid_argument (rank {r}, peer 1, step chunks): handle exchange: rank 1 announced 1 chunks; "
                "rank {r} expects 2 from it"}}) {
    const ProcessRun r = launch(2, std::string(c.flags) + " --expect refused");
    EXPECT_EQ(r.exit_code, 0) << c.flags << "\n" << r.output;
    for (int rank = 0; rank < 2; ++rank) {
      std::string says = c.says;
      for (size_t at; (at = says.find("{r}")) != std::string::npos;) says.replace(at, 3, std::to_string(rank));
      EXPECT_EQ(count(r.output, "rank " + std::to_string(rank) + ": EXCHANGE REFUSED: " + says), 1u)
          << c.flags << "\n" << r.output;
    }
    EXPECT_EQ(count(r.output, "NOTHING LEFT"), 2u) << c.flags << "\n" << r.output;
  }
}

}  // namespace
