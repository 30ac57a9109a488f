// Reading each launcher's environment: torchrun (whose agent holds
// MASTER_PORT), a plain torchrun-style environment (engramlab launch), Open
// MPI and Slurm, in that precedence, and the errors that name the variable
// and the fix.
#include "backends/ipc/launch_env.h"
#include "backends/ipc/job_token.h"
#include "core/placements/host_shared.h"
#include "tests/golden_messages.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

namespace engram::ipc {
namespace {

using ::engram::testing::golden_message;

const std::string kToken = "fedcba9876543210fedcba9876543210";

EnvLookup fake(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::map<std::string, std::string> plain_vars() {
  return {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"},
          {"MASTER_PORT", "29500"}, {"ENGRAMLAB_JOB_TOKEN", kToken}, {"ENGRAMLAB_JOB_ID", "job-7"}};
}

// What torchrun's agent gives each worker (torch/distributed/elastic/agent/
// server/local_elastic_agent.py): the rank variables plus TORCHELASTIC_*.
std::map<std::string, std::string> torchrun_vars() {
  return {{"RANK", "5"},
          {"WORLD_SIZE", "16"},
          {"LOCAL_RANK", "1"},
          {"LOCAL_WORLD_SIZE", "8"},
          {"GROUP_RANK", "0"},
          {"MASTER_ADDR", "node0"},
          {"MASTER_PORT", "29500"},
          {"TORCHELASTIC_RUN_ID", "job 42"},
          {"TORCHELASTIC_USE_AGENT_STORE", "True"},
          {"TORCHELASTIC_RESTART_COUNT", "0"},
          {"ENGRAMLAB_JOB_TOKEN", kToken}};
}

std::map<std::string, std::string> slurm_vars() {
  return {{"SLURM_PROCID", "3"},         {"SLURM_NTASKS", "8"},    {"SLURM_LOCALID", "1"},
          {"SLURM_JOB_ID", "4242"},      {"SLURM_STEP_ID", "0"},   {"SLURM_STEP_NODELIST", "gpu[003-004]"},
          {"SLURM_NTASKS_PER_NODE", "4"}, {"ENGRAMLAB_JOB_TOKEN", kToken}};
}

std::map<std::string, std::string> ompi_vars() {
  return {{"OMPI_COMM_WORLD_RANK", "2"},       {"OMPI_COMM_WORLD_SIZE", "4"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
          {"PMIX_NAMESPACE", "prterun-box-12345@1"}, {"ENGRAMLAB_JOB_TOKEN", kToken}};
}

TEST(LaunchEnv, PlainTorchrunStyleUsesMasterPortAsIs) {
  auto env = read_launch_env(fake(plain_vars()));
  ASSERT_TRUE(env.is_ok()) << env.status().to_string();
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->master_addr, "10.0.0.1");
  EXPECT_EQ(env->master_port, 29500);
  EXPECT_EQ(env->job_id, "job-7");
  EXPECT_EQ(env->launcher, "torchrun-style");
}

TEST(LaunchEnv, TorchrunAgentHoldsMasterPortSoRankZeroListensOneAbove) {
  auto env = read_launch_env(fake(torchrun_vars()));
  ASSERT_TRUE(env.is_ok()) << env.status().to_string();
  EXPECT_EQ(env->launcher, "torchrun");
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->local_world_size, 8);
  EXPECT_EQ(env->master_addr, "node0");
  EXPECT_EQ(env->master_port, 29501);
  EXPECT_NE(env->rendezvous_source.find("torchrun's agent serves its store on MASTER_PORT=29500"), std::string::npos)
      << env->rendezvous_source;
  // No ENGRAMLAB_JOB_ID: the run id and port name the job, made safe for file names.
  EXPECT_EQ(env->job_id, "torchrun-job-42-29500");

  auto vars = torchrun_vars();
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";  // the agent picked a free port and let it go
  EXPECT_EQ(read_launch_env(fake(vars))->master_port, 29500);
  vars = torchrun_vars();
  vars["ENGRAMLAB_MASTER_PORT"] = "31000";  // the user's word wins
  EXPECT_EQ(read_launch_env(fake(vars))->master_port, 31000);
  vars = torchrun_vars();
  vars["MASTER_PORT"] = "65535";
  auto top = read_launch_env(fake(vars));
  ASSERT_FALSE(top.is_ok());
  EXPECT_NE(top.status().message().find("ENGRAMLAB_MASTER_PORT"), std::string::npos);
}

TEST(LaunchEnv, TorchrunUnderSrunFollowsTorchrunNotTheBatchStep) {
  auto vars = torchrun_vars();
  vars["SLURM_PROCID"] = "0";  // srun started one torchrun per node
  vars["SLURM_NTASKS"] = "2";
  vars["SLURM_LOCALID"] = "0";
  vars["SLURM_JOB_ID"] = "77";
  auto env = read_launch_env(fake(vars));
  ASSERT_TRUE(env.is_ok()) << env.status().to_string();
  EXPECT_EQ(env->launcher, "torchrun");
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 16);
}

TEST(LaunchEnv, SlurmTakesTheFirstNodeAndDerivesThePort) {
  auto env = read_launch_env(fake(slurm_vars()));
  ASSERT_TRUE(env.is_ok()) << env.status().to_string();
  EXPECT_EQ(env->launcher, "slurm");
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 4);
  EXPECT_EQ(env->master_addr, "gpu003");
  EXPECT_EQ(env->master_port, derived_port("slurm:4242.0"));
  EXPECT_GE(env->master_port, 20000);
  EXPECT_LT(env->master_port, 32000);
  EXPECT_EQ(env->job_id, "slurm-4242-0");
  // Every rank of the step derives the same port; another step another one.
  auto other_rank = slurm_vars();
  other_rank["SLURM_PROCID"] = "6";
  EXPECT_EQ(read_launch_env(fake(other_rank))->master_port, env->master_port);
  auto next_step = slurm_vars();
  next_step["SLURM_STEP_ID"] = "1";
  EXPECT_EQ(read_launch_env(fake(next_step))->job_id, "slurm-4242-1");
  // MASTER_ADDR and MASTER_PORT override.
  auto given = slurm_vars();
  given["MASTER_ADDR"] = "10.1.2.3";
  given["MASTER_PORT"] = "29400";
  auto g = read_launch_env(fake(given));
  EXPECT_EQ(g->master_addr, "10.1.2.3");
  EXPECT_EQ(g->master_port, 29400);
}

TEST(LaunchEnv, SlurmHostLists) {
  EXPECT_EQ(first_slurm_host("gpu[003-010,017],login1").value(), "gpu003");
  EXPECT_EQ(first_slurm_host("node7").value(), "node7");
  EXPECT_EQ(first_slurm_host("a,b").value(), "a");
  EXPECT_EQ(first_slurm_host("rack[1-2]-n[05,07]").value(), "rack1-n05");
  EXPECT_FALSE(first_slurm_host("gpu[003").is_ok());
  EXPECT_FALSE(first_slurm_host("").is_ok());
}

TEST(LaunchEnv, OpenMpiOnOneHostNeedsNothingMore) {
  auto env = read_launch_env(fake(ompi_vars()));
  ASSERT_TRUE(env.is_ok()) << env.status().to_string();
  EXPECT_EQ(env->launcher, "open mpi");
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->master_addr, "127.0.0.1");
  EXPECT_EQ(env->master_port, derived_port("ompi:prterun-box-12345@1"));
  EXPECT_EQ(env->job_id.rfind("ompi-", 0), 0u);
  // Across hosts the address must be given, and the error says how.
  auto vars = ompi_vars();
  vars["OMPI_COMM_WORLD_SIZE"] = "8";
  auto across = read_launch_env(fake(vars));
  ASSERT_FALSE(across.is_ok());
  EXPECT_NE(across.status().message().find("mpirun -x MASTER_ADDR"), std::string::npos) << across.status().message();
  // mpirun inside a Slurm allocation inherits the batch step's SLURM_*: Open MPI's variables win.
  vars = ompi_vars();
  vars["SLURM_PROCID"] = "0";
  vars["SLURM_NTASKS"] = "1";
  vars["SLURM_LOCALID"] = "0";
  EXPECT_EQ(read_launch_env(fake(vars))->rank, 2);
}

void expect_invalid(std::map<std::string, std::string> vars, const std::string& words) {
  auto env = read_launch_env(fake(std::move(vars)));
  ASSERT_EQ(env.status().code(), ErrorCode::kInvalidArgument) << words;
  EXPECT_NE(env.status().message().find(words), std::string::npos) << env.status().message();
}

TEST(LaunchEnv, MissingOrBadValuesNameTheVariableAndTheFix) {
  expect_invalid({}, "none of RANK (engramlab launch, torchrun), OMPI_COMM_WORLD_RANK (mpirun) or SLURM_PROCID (srun)");
  auto v = plain_vars();
  v.erase("WORLD_SIZE");
  expect_invalid(v, "WORLD_SIZE is not set though RANK is");
  v = plain_vars();
  v["RANK"] = "4";
  expect_invalid(v, "RANK=4 is not below WORLD_SIZE=4");
  v = plain_vars();
  v.erase("MASTER_ADDR");
  expect_invalid(v, "MASTER_ADDR is not set");
  v = plain_vars();
  v.erase("MASTER_PORT");
  expect_invalid(v, "MASTER_PORT is not set");
  v = plain_vars();
  v["MASTER_PORT"] = "70000";
  expect_invalid(v, "MASTER_PORT=70000");
  v = plain_vars();
  v["WORLD_SIZE"] = "four";
  expect_invalid(v, "WORLD_SIZE='four'");
  v = plain_vars();
  v["ENGRAMLAB_JOB_ID"] = "a/b";
  expect_invalid(v, "only [A-Za-z0-9._-]");
  v = plain_vars();
  v.erase("ENGRAMLAB_JOB_ID");
  expect_invalid(v, "ENGRAMLAB_JOB_ID is not set");
  // The token error carries the exact line to run, and how each launcher passes it on.
  v = plain_vars();
  v.erase("ENGRAMLAB_JOB_TOKEN");
  expect_invalid(v, "ENGRAMLAB_JOB_TOKEN is not set");
  expect_invalid(v, kJobTokenLine);
  expect_invalid(v, "mpirun needs -x ENGRAMLAB_JOB_TOKEN");
  auto s = slurm_vars();
  s.erase("SLURM_JOB_ID");
  expect_invalid(s, "SLURM_JOB_ID is not set");
}

// Sizes are checked where they are read: a world of 16 million is refused at
// once, naming the variable and the most a job may have, not after rank 0
// has sized itself for it; a token the fd channel would refuse is refused here.
TEST(LaunchEnv, AWorldAboveTheMostRanksAJobMayHaveIsRefusedNamingTheVariable) {
  auto vars = plain_vars();
  vars["WORLD_SIZE"] = "16777216";
  const Status s = read_launch_env(fake(vars)).status();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("WORLD_SIZE=16777216 is above 1048576"), std::string::npos) << s.message();
  vars["WORLD_SIZE"] = "1048576";
  EXPECT_TRUE(read_launch_env(fake(vars)).is_ok());
  vars["WORLD_SIZE"] = "99999999999999999999";
  const Status huge = read_launch_env(fake(vars)).status();
  EXPECT_NE(huge.message().find("WORLD_SIZE='99999999999999999999' is not an integer"), std::string::npos)
      << huge.message();
}

TEST(LaunchEnv, ATokenLongerThanTheFdChannelTakesIsRefusedNamingItsLength) {
  auto vars = plain_vars();
  vars["ENGRAMLAB_JOB_TOKEN"] = std::string(300, 'a');
  const Status s = read_launch_env(fake(vars)).status();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find(golden_message("launch.job_token_too_long")), std::string::npos) << s.message();
  vars["ENGRAMLAB_JOB_TOKEN"] = std::string(256, 'a');
  EXPECT_TRUE(read_launch_env(fake(vars)).is_ok());
  vars["ENGRAMLAB_JOB_TOKEN"] = "short";
  EXPECT_NE(read_launch_env(fake(vars)).status().message().find("5 characters, shorter than 16"), std::string::npos);
}

// A job's shared names carry a part no other user can guess (issue 50, item
// 10): job ids are predictable (Slurm's, the launcher's), the token is not.
// Every launcher's ranks get the part from the token and job id, so the
// ranks of one job agree without a word.
TEST(LaunchEnv, EveryLauncherNamesShmSegmentsWithAPartOfTheToken) {
  for (const auto& vars : {plain_vars(), torchrun_vars(), slurm_vars(), ompi_vars()}) {
    auto env = read_launch_env(fake(vars));
    ASSERT_TRUE(env.is_ok()) << env.status().to_string();
    EXPECT_TRUE(is_shm_name_part(env->shm_name_part)) << env->launcher << ": " << env->shm_name_part;
    EXPECT_EQ(env->shm_name_part, shm_name_part(kToken, env->job_id)) << env->launcher;
  }
  // Pinned (ranks of two versions that disagreed would never find each
  // other's segments), as Python's hmac computes it: hmac.new(token,
  // b"engramlab shm names 1\0" + job_id, sha256).hexdigest()[:16].
  EXPECT_EQ(shm_name_part(kToken, "job-7"), "d9994e469a184e13");
  auto other_rank = plain_vars();
  other_rank["RANK"] = "3";
  other_rank["LOCAL_RANK"] = "3";
  EXPECT_EQ(read_launch_env(fake(other_rank))->shm_name_part, read_launch_env(fake(plain_vars()))->shm_name_part);
}

TEST(LaunchEnv, TwoJobsWithTheSameJobIdNameDifferentSegments) {
  auto vars = plain_vars();
  auto first = read_launch_env(fake(vars));
  vars["ENGRAMLAB_JOB_TOKEN"] = "0123456789abcdef0123456789abcdef";
  auto second = read_launch_env(fake(vars));
  ASSERT_TRUE(first.is_ok() && second.is_ok());
  ASSERT_EQ(first->job_id, second->job_id);
  EXPECT_NE(host_table_segment_name(first->job_id, first->shm_name_part, 1),
            host_table_segment_name(second->job_id, second->shm_name_part, 1));
  // The same token under the next job id (a Slurm step, a torchrun run id):
  // another part, so one step's names, seen in /dev/shm, do not give away the next's.
  vars = plain_vars();
  vars["ENGRAMLAB_JOB_ID"] = "job-8";
  EXPECT_NE(read_launch_env(fake(vars))->shm_name_part, first->shm_name_part);
}

// What another user knows (the job id) does not decide the name: over fresh
// tokens as `engramlab launch` draws them, one job id gets as many parts as
// tokens, none the emulator's fixed one, none holding the token's text.
TEST(LaunchEnv, AShmNameCannotBePredictedFromTheJobIdAlone) {
  std::set<std::string> parts;
  constexpr int kTokens = 64;
  for (int i = 0; i < kTokens; ++i) {
    auto token = random_job_token();
    ASSERT_TRUE(token.is_ok()) << token.status().to_string();
    const std::string part = shm_name_part(*token, "slurm-4242-0");
    EXPECT_NE(part, kFixedShmNamePart);
    EXPECT_EQ(token->find(part), std::string::npos) << "the part is a MAC of the token, not a piece of it";
    parts.insert(part);
  }
  EXPECT_EQ(parts.size(), static_cast<size_t>(kTokens));
}

}  // namespace
}  // namespace engram::ipc
