// The acceptance test's rank body on the emulator, for every placement:
// every rank's device lookups (eager and replayed) equal the CPU reference on
// the checked slots, device_peer equals the collective over the same shards,
// the decode loop's device-hashed ids and their lookups equal the CPU
// hasher's and the CPU reference, and nothing is left in the ledger. The same body runs on GPUs under a
// launcher (engramlab acceptance).
#include "operator_checks/acceptance_rank.h"

#include <gtest/gtest.h>

#include <mutex>

#include "core/base/units.h"
#include "core/runtime/engram_runtime.h"
#include "sim/world.h"

namespace engram {
namespace {

using namespace operator_checks;  // the code under test

HostSpec host(uint64_t tmpfs_bytes) {
  HostSpec h;
  h.name = "gb200-0";
  h.gpu_count = 4;
  h.gpu_model = "GB200";
  h.tmpfs_bytes_total = tmpfs_bytes;
  h.nvlink_domain = "nvl-0";
  h.imex_channel = true;
  h.fabric_attribute = true;
  return h;
}

struct Case {
  const char* name;
  Placement placement;
  ParallelLayout layout;
  EngramConfig config;
  uint64_t tmpfs_bytes;
  const char* table_model = "tiny";
};

std::vector<Case> cases() {
  EngramConfig collective;
  EngramConfig peer;
  peer.peer_shards = true;
  EngramConfig offload;
  offload.cpu_offload = true;
  EngramConfig private_copies = offload;
  private_copies.dp_shared_memory = false;
  EngramConfig head_slices;
  head_slices.placement = "device_head_sharded";  // the rules never pick it
  return {
      {"device_collective", Placement::kDeviceCollective, {4, 1}, collective, 190 * kGiB},
      {"device_peer", Placement::kDevicePeer, {4, 1}, peer, 190 * kGiB},
      {"host_shared", Placement::kHostShared, {1, 4}, offload, 190 * kGiB},
      {"host_head_sharded", Placement::kHostHeadSharded, {1, 4}, offload, 64 * kMiB},
      {"host_private", Placement::kHostPrivate, {1, 4}, private_copies, 190 * kGiB},
      {"device_head_sharded", Placement::kDeviceHeadSharded, {4, 1}, head_slices, 190 * kGiB},
      // 7 heads over 4: slices of 2, the last short.
      {"device_head_sharded tp2 dp2", Placement::kDeviceHeadSharded, {2, 2}, head_slices, 190 * kGiB, "tiny-7h"},
  };
}

TEST(AcceptanceRank, EveryPlacementsDeviceLookupEqualsTheCpuReferenceEagerAndReplayed) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    sim::WorldSpec spec;
    spec.hosts = {host(c.tmpfs_bytes)};
    spec.seed = 41;
    operator_checks::AcceptanceOptions options;
    options.runtime.table_model = model_preset(c.table_model).value();
    options.runtime.layout = c.layout;
    options.runtime.config = c.config;
    options.token_counts = {1, 5, 40};
    options.sampled_slots = 64;
    options.warmup_replays = 1;
    options.timed_replays = 2;
    std::mutex mutex;
    std::vector<operator_checks::AcceptanceReport> reports(4);
    WarningSink sink;
    auto run = sim::run_world(spec, [&](RankBackend& backend) -> Status {
      operator_checks::AcceptanceReport report;
      ENGRAM_RETURN_IF_ERROR(operator_checks::run_acceptance_rank(backend, options, sink, report));
      std::lock_guard lock(mutex);
      reports[static_cast<size_t>(backend.world_rank)] = std::move(report);
      return Status::ok();
    });
    ASSERT_TRUE(run.is_ok()) << run.status().to_string();
    ASSERT_TRUE(run->all_ok()) << run->summary();
    EXPECT_TRUE(run->leaks.empty()) << run->summary();
    const size_t rows = options.runtime.table_model.tables.size() * options.token_counts.size();
    for (const AcceptanceReport& report : reports) {
      EXPECT_EQ(report.placement, c.placement);
      ASSERT_EQ(report.rows.size(), rows);
      for (const AcceptanceRow& row : report.rows) {
        EXPECT_TRUE(row.mismatches.empty()) << format_acceptance_row(report, row);
        EXPECT_GT(row.slots_checked, 0);
        EXPECT_LE(row.slots_checked, row.slots);
        EXPECT_EQ(row.cross_checked, c.placement == Placement::kDevicePeer);
        EXPECT_LE(row.latency_us_p10, row.latency_us_p90);
      }
      // The decode loop: device-hashed ids looked up from one replayed graph.
      EXPECT_TRUE(report.decode.ran);
      EXPECT_TRUE(report.decode.mismatches.empty()) << format_decode_loop(report.rank, report.placement, report.decode);
      EXPECT_EQ(report.decode.steps, options.decode_steps);
      int64_t ids_per_step = 0;  // every table's ids of the bucket, padding included
      for (const TableSpec& t : options.runtime.table_model.tables) ids_per_step += options.decode_bucket_tokens * t.head_count();
      EXPECT_EQ(report.decode.ids_checked, options.decode_steps * ids_per_step);
      EXPECT_EQ(report.decode.slots_checked, report.decode.ids_checked);
      EXPECT_GT(report.decode.request_tokens, options.decode_steps * options.decode_requests);
      EXPECT_TRUE(report.passed());
    }
  }
}

TEST(AcceptanceRank, NoDeviceIsAFailedPreconditionNamingTheRank) {
  // The emulator gives every rank a device; take it away from one rank's
  // view and only that rank refuses, before it starts anything.
  sim::WorldSpec spec;
  spec.hosts = {host(190 * kGiB)};
  spec.hosts[0].gpu_count = 1;
  spec.seed = 43;
  operator_checks::AcceptanceOptions options;
  options.runtime.table_model = model_preset("tiny").value();
  options.runtime.layout = ParallelLayout{1, 1};
  WarningSink sink;
  auto run = sim::run_world(spec, [&](RankBackend backend) -> Status {
    backend.compute = nullptr;
    operator_checks::AcceptanceReport report;
    Status s = operator_checks::run_acceptance_rank(backend, options, sink, report);
    if (s.code() != ErrorCode::kFailedPrecondition || s.context().rank != 0 ||
        s.message().find("GPU") == std::string::npos)
      return internal_error("expected failed_precondition naming the missing GPU, got " + s.to_string());
    return Status::ok();
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
}

TEST(AcceptanceRank, BadTokenCountsAreInvalidArguments) {
  sim::WorldSpec spec;
  spec.hosts = {host(190 * kGiB)};
  spec.hosts[0].gpu_count = 1;
  spec.seed = 47;
  operator_checks::AcceptanceOptions options;
  options.runtime.table_model = model_preset("tiny").value();
  options.runtime.layout = ParallelLayout{1, 1};
  WarningSink sink;
  auto run = sim::run_world(spec, [&](RankBackend& backend) -> Status {
    operator_checks::AcceptanceReport report;
    options.token_counts = {};
    Status empty = operator_checks::run_acceptance_rank(backend, options, sink, report);
    options.token_counts = {4, 0};
    Status zero = run_acceptance_rank(backend, options, sink, report);
    if (empty.code() != ErrorCode::kInvalidArgument || zero.code() != ErrorCode::kInvalidArgument ||
        zero.message().find("0 is not a positive token count") == std::string::npos)
      return internal_error("expected invalid_argument twice, got " + empty.to_string() + " / " + zero.to_string());
    return Status::ok();
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
}

// The two device lookups that are not built yet answer failed_precondition
// on every rank (so no group waits), naming why, and the host lookup still
// serves.
TEST(AcceptanceRank, DeviceLookupsNotBuiltYetSayWhyOnEveryRank) {
  struct Case {
    const char* name;
    EngramConfig config;
    uint64_t tmpfs_bytes;
    Placement placement;
    const char* why;
  };
  EngramConfig head_sharded;
  head_sharded.cpu_offload = true;
  EngramConfig sequence_parallel;
  sequence_parallel.sequence_parallel = true;
  const Case cases[] = {
      {"host_head_sharded at tp 2", head_sharded, 64 * kMiB, Placement::kHostHeadSharded, "at tp 1 only"},
      {"sequence parallel", sequence_parallel, 190 * kGiB, Placement::kDeviceCollective, "sequence_parallel is on"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    sim::WorldSpec spec;
    spec.hosts = {host(c.tmpfs_bytes)};
    spec.seed = 53;
    RuntimeOptions options;
    options.table_model = model_preset("tiny").value();
    options.layout = ParallelLayout{2, 2};
    options.config = c.config;
    WarningSink sink;
    auto run = sim::run_world(spec, [&](RankBackend& backend) -> Status {
      ENGRAM_ASSIGN_OR_RETURN(auto runtime, EngramRuntime::start(backend, options, sink));
      if (runtime->placement() != c.placement) return internal_error("unexpected placement");
      const TableSpec& table = options.table_model.tables[0];
      const std::vector<int64_t> ids(static_cast<size_t>(table.head_count()), 5);
      std::vector<uint16_t> out(ids.size() * static_cast<size_t>(table.dim));
      if (runtime->device_lookup_ready()) return internal_error("device_lookup_ready() says yes");
      const Status device = runtime->lookup_through_device(0, ids, 4, out);
      if (device.code() != ErrorCode::kFailedPrecondition || device.message().find(c.why) == std::string::npos)
        return internal_error("expected failed_precondition saying '" + std::string(c.why) + "', got " +
                              device.to_string());
      if (!c.config.sequence_parallel) ENGRAM_RETURN_IF_ERROR(runtime->lookup(0, ids, 4, out));
      return runtime->stop();
    });
    ASSERT_TRUE(run.is_ok()) << run.status().to_string();
    EXPECT_TRUE(run->all_ok()) << run->summary();
    EXPECT_TRUE(run->leaks.empty()) << run->summary();
  }
}

}  // namespace
}  // namespace engram
