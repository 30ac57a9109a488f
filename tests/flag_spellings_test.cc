// Flags as users bring them (issue 27): vLLM's, SGLang's and torchrun's
// spellings do what ours do on every command that takes the flag; an
// unknown flag is refused (exit 2) with the closest of the command's own;
// and `launch` without a rank count names every spelling it takes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "tests/engramlab_command.h"

namespace engram {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::CommandOutput;
using testing::run_engramlab;

// stdout alone: what a plan prints, to compare whole.
CommandOutput plan_stdout(const std::string& args) { return run_engramlab("plan " + args, "", "2>/dev/null"); }

// `engramlab args` exits `code` and prints `words`.
void expect_outcome(const std::string& args, int code, const std::string& words) {
  const CommandOutput out = run_engramlab(args);
  EXPECT_EQ(out.exit_code, code) << args << "\n" << out.text;
  EXPECT_THAT(out.text, HasSubstr(words)) << args;
}

TEST(FlagSpellings, EngineSpellingsOfTpAndDpPlanTheSameAsOurs) {
  for (const std::string json : {"", " --json"}) {
    const CommandOutput ours = plan_stdout("--tp 4 --dp 2" + json);
    ASSERT_EQ(ours.exit_code, 0) << ours.text;
    ASSERT_THAT(ours.text, HasSubstr(json.empty() ? "tp 4 x dp 2 = 8 ranks" : "\"tp\":4"));
    for (const std::string theirs : {"--tensor-parallel-size 4 --data-parallel-size 2", "-tp 4 -dp 2",
                                     "--tp-size 4 --dp-size 2", "--tensor-parallel-size=4 -dp=2"}) {
      const CommandOutput other = plan_stdout(theirs + json);
      EXPECT_EQ(other.exit_code, 0) << theirs << json << "\n" << other.text;
      EXPECT_EQ(other.text, ours.text) << theirs << json;
    }
  }
}

TEST(FlagSpellings, MemoryFractionAndExpertParallelSpellings) {
  const CommandOutput ours = plan_stdout("--tp 2 --dp 2 --gpu-memory-fraction 0.8 --ep 2 --json");
  ASSERT_EQ(ours.exit_code, 0) << ours.text;
  for (const std::string theirs : {"--gpu-memory-utilization 0.8 --expert-parallel-size 2",
                                   "--mem-fraction-static 0.8 --ep-size 2"}) {
    EXPECT_EQ(plan_stdout("--tp 2 --dp 2 --json " + theirs).text, ours.text) << theirs;
  }
  // vLLM's switch is not a size: expert parallel over every rank.
  const CommandOutput all = plan_stdout("--tp 2 --dp 2 --enable-expert-parallel --json");
  EXPECT_EQ(all.exit_code, 0) << all.text;
  EXPECT_THAT(all.text, HasSubstr("\"ep\":4"));
  expect_outcome("plan --tp 2 --dp 2 --enable-expert-parallel --ep 2", 2,
                 "--enable-expert-parallel: sets ep = tp x dp, as vLLM does");
}

TEST(FlagSpellings, HelpSaysWhichToolSpellsEachAlias) {
  const CommandOutput plan = run_engramlab("plan --help");
  EXPECT_THAT(plan.text, AllOf(HasSubstr("--tensor-parallel-size, vLLM's and SGLang's"), HasSubstr("-tp, vLLM's"),
                               HasSubstr("--tp-size, SGLang's"), HasSubstr("--gpu-memory-utilization, vLLM's"),
                               HasSubstr("--mem-fraction-static, SGLang's"), HasSubstr("--ep-size, SGLang's"),
                               HasSubstr("--enable-expert-parallel")));
  const CommandOutput launch = run_engramlab("launch --help");
  EXPECT_THAT(launch.text, AllOf(HasSubstr("--nproc_per_node, torchrun's"), HasSubstr("--node_rank, torchrun's"),
                                 HasSubstr("--master_addr, torchrun's"), HasSubstr("--master_port, torchrun's"),
                                 HasSubstr("--standalone"), HasSubstr("gpu (the GPUs visible)")));
}

// The launched ranks' commands and doctor read the same spellings: a value
// out of range is refused by our --tp's own check, not as an unknown flag.
TEST(FlagSpellings, RankCommandsAndDoctorTakeTheSpellingsToo) {
  for (const char* args : {"acceptance --table-model tiny --tensor-parallel-size 3", "bench --table-model tiny -tp 3",
                           "acceptance --table-model tiny --tp-size 3"}) {
    const CommandOutput out = testing::run_engramlab_without_gpu(testing::launch_one_rank(args));
    EXPECT_EQ(out.exit_code, 2) << args << "\n" << out.text;
    EXPECT_THAT(out.text, HasSubstr("--tp: '3' is not a whole number in [0, 1]")) << args;
  }
  const CommandOutput dp =
      testing::run_engramlab_without_gpu(testing::launch_one_rank("bench --table-model tiny --data-parallel-size 3"));
  EXPECT_EQ(dp.exit_code, 2) << dp.text;
  EXPECT_THAT(dp.text, HasSubstr("--dp: '3' is not a whole number in [0, 1]"));
  const CommandOutput doctor = run_engramlab("doctor --json --tensor-parallel-size 2", "", "2>/dev/null");
  EXPECT_EQ(doctor.exit_code, 0) << doctor.text;
  EXPECT_THAT(doctor.text, HasSubstr("\"tp\":2"));
}

TEST(FlagSpellings, LaunchTakesTorchrunsSpellings) {
  const CommandOutput two = run_engramlab("launch --nproc_per_node 2 -- sh -c 'echo rank $RANK of $WORLD_SIZE'");
  EXPECT_EQ(two.exit_code, 0) << two.text;
  EXPECT_THAT(two.text, AllOf(HasSubstr("[rank 0] rank 0 of 2"), HasSubstr("[rank 1] rank 1 of 2")));
  const CommandOutput named = run_engramlab(
      "launch --nnodes 1 --node_rank 0 --master_addr 127.0.0.1 --master_port 0 --nproc_per_node 1 -- "
      "sh -c 'echo at $MASTER_ADDR node $NODE_RANK'");
  EXPECT_EQ(named.exit_code, 0) << named.text;
  EXPECT_THAT(named.text, HasSubstr("[rank 0] at 127.0.0.1 node 0"));
  const CommandOutput standalone = run_engramlab("launch --standalone --nproc-per-node 2 -- sh -c 'echo $WORLD_SIZE'");
  EXPECT_EQ(standalone.exit_code, 0) << standalone.text;
  EXPECT_THAT(standalone.text, AllOf(HasSubstr("[rank 1] 2"), HasSubstr("rendezvous 127.0.0.1:")));
  expect_outcome("launch --standalone --nnodes 2 --nproc-per-node 1 -- true", 2, "--standalone: one node");
  expect_outcome("launch --nnodes 1:2 --nproc-per-node 1 -- true", 2, "MIN:MAX range (torchrun's) is not supported");
}

TEST(FlagSpellings, NprocPerNodeGpuAutoAndCpuCountAsTorchrunDoes) {
  const std::string cpus = std::to_string(::sysconf(_SC_NPROCESSORS_ONLN));
  // No GPU visible, whatever this machine has.
  const CommandOutput gpu = run_engramlab("launch --nproc-per-node gpu -- true", "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(gpu.exit_code, 2) << gpu.text;
  EXPECT_THAT(gpu.text, AllOf(HasSubstr("--nproc-per-node gpu: no GPU is visible"), HasSubstr("auto")));
  for (const char* word : {"auto", "cpu"}) {
    const CommandOutput out = run_engramlab(
        std::string("launch --nproc_per_node ") + word + " -- sh -c 'echo size $LOCAL_WORLD_SIZE'",
        "CUDA_VISIBLE_DEVICES=");
    EXPECT_EQ(out.exit_code, 0) << word << "\n" << out.text;
    EXPECT_THAT(out.text, HasSubstr("[rank 0] size " + cpus)) << word;
  }
  expect_outcome("launch --nproc-per-node many -- true", 2,
                 "--nproc-per-node: 'many' is not a whole number in [1, 4096]; write e.g. --nproc-per-node 1, or gpu, "
                 "auto or cpu");
}

TEST(FlagSpellings, LaunchWithoutARankCountNamesWhatIsMissingAndEverySpelling) {
  const CommandOutput out = run_engramlab("launch -- true");
  EXPECT_EQ(out.exit_code, 2) << out.text;
  EXPECT_THAT(out.text, AllOf(HasSubstr("how many ranks to start on this node is missing"),
                              HasSubstr("--nproc-per-node N"), HasSubstr("-n, --nproc, or --nproc_per_node"),
                              HasSubstr("gpu, auto or cpu"), Not(HasSubstr("--nproc is required"))));
}

TEST(FlagSpellings, UnknownFlagsExit2WithTheClosestOfTheCommandsOwn) {
  struct Case {
    std::string args, message;
  } cases[] = {
      {"plan --tp-sise 4", "engramlab plan: unknown flag --tp-sise; did you mean --tp-size (the same as --tp)?"},
      {"plan --tensor-paralel-size 4", "did you mean --tensor-parallel-size (the same as --tp)?"},
      {"plan --gpu-memory-utilisation 0.9", "did you mean --gpu-memory-utilization (the same as --gpu-memory-fraction)?"},
      {"plan --shm_size 1GiB", "did you mean --shm-size?"},
      {"launch --nproc-per-nod 2 -- true", "did you mean --nproc-per-node?"},
      {"launch --nproc_per_nod 2 -- true", "did you mean --nproc_per_node (the same as --nproc-per-node)?"},
      {"launch --master-adr x -n 1 -- true", "did you mean --master-addr?"},
      {"scenario run --sed 3 x.yaml", "engramlab scenario run: unknown flag --sed; did you mean --seed?"},
      {"plan --bogus", "unknown flag --bogus; `engramlab plan --help` lists the flags it takes"},
      {"plan --version", "--version is engramlab's own: engramlab --version"},
      {"pln --tp 2", "engramlab: unknown command 'pln'; did you mean plan? engramlab takes: "},
      {"shm lst", "engramlab shm: unknown command 'lst'; did you mean list? engramlab shm takes: "},
      {"launch -n 2 sh -c true", "unknown flag -c; `engramlab launch --help` lists the flags it takes; if it is the "
                                 "command's own flag, put `--` before the command"},
  };
  for (const Case& c : cases) expect_outcome(c.args, 2, c.message);
  // Under --json the error is a JSON document on stdout.
  const CommandOutput json = run_engramlab("plan --json --tp-sise 4", "", "2>/dev/null");
  EXPECT_EQ(json.exit_code, 2);
  EXPECT_THAT(json.text, AllOf(HasSubstr("\"code\":\"invalid_argument\""), HasSubstr("did you mean --tp-size")));
  // Words after `--` are the ranks' own.
  const CommandOutput passed = run_engramlab("launch -n 1 -- echo --tp-sise -tp");
  EXPECT_EQ(passed.exit_code, 0) << passed.text;
  EXPECT_THAT(passed.text, HasSubstr("[rank 0] --tp-sise -tp"));
}

}  // namespace
}  // namespace engram
