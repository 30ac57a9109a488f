// The real backend's handle exchange (backends/cuda over the real rendezvous
// and fd channel) in real processes over the emulated CUDA driver, on the
// worlds of the issue: 2 GB300 nodes of one NVLink domain (FABRIC), one B300
// (POSIX fds), 2 hosts without IMEX (the clear error before any import), an
// NVL72 rack with an import fault, ranks sharing a GPU. Each rank reads every
// peer's shard through its mapping on the CPU, byte by byte against the fill
// rule (tests/emulated_rank_worker_main.cc), and the outcome (handle type, or
// the error's kind and words) equals the emulator's for the same deployment.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <regex>
#include <set>

#include "core/base/splitmix64.h"

#include "core/exchange/handle_exchange.h"
#include "sim/world.h"
#include "tests/emulated_driver_world.h"

namespace engram {
namespace {

using testing::count;
using testing::make_emulated_world;
using testing::run_emulated_ranks;

constexpr uint64_t kShardBytes = 3ull << 20;  // rounds up to 4 MiB: the exchange's rounding runs too

struct EmulatorOutcome {
  std::string handle_type;  // of rank 0, when every rank succeeded
  Status first_failure;
  std::vector<Status> statuses;  // per rank
};

// The same deployment on the emulator (sim/): every rank runs the exchange.
EmulatorOutcome on_the_emulator(const Deployment& d, sim::FaultPlan faults = {}) {
  sim::WorldSpec spec;
  spec.hosts = d.hosts;
  spec.ranks = sim::ranks_filling_gpus(d.hosts);
  spec.faults = std::move(faults);
  auto shared_type = std::make_shared<std::string>();
  auto run = sim::run_world(spec, [shared_type](RankBackend& backend) -> Status {
    auto shared = exchange_shareable_handles(backend, *backend.world, kShardBytes);
    if (!shared.is_ok()) return shared.status();
    if (backend.world_rank == 0) *shared_type = handle_type_name(shared->handle_type());
    return shared->teardown();
  });
  EmulatorOutcome out;
  EXPECT_TRUE(run.is_ok()) << run.status().to_string();
  if (!run.is_ok()) return out;
  out.statuses = run->statuses;
  for (const Status& s : run->statuses)
    if (!s.is_ok() && out.first_failure.is_ok()) out.first_failure = s;
  EXPECT_TRUE(run->leaks.empty()) << run->summary();
  if (out.first_failure.is_ok()) out.handle_type = *shared_type;
  return out;
}

void expect_exchanged(const std::string& yaml, int ranks, const std::string& handle_type, const std::string& extra = "") {
  auto world = make_emulated_world(yaml);
  ASSERT_TRUE(world.is_ok()) << world.status().to_string();
  const auto run = run_emulated_ranks(**world, fmt::format("exchange --bytes {}{}", kShardBytes, extra));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(count(run.output, "handle " + handle_type + ", " + std::to_string(ranks) + " ranks: EXCHANGE OK"),
            static_cast<size_t>(ranks))
      << run.output;
  EXPECT_EQ(count(run.output, "NOTHING LEFT"), static_cast<size_t>(ranks)) << run.output;
  EXPECT_EQ(on_the_emulator((*world)->deployment).handle_type, handle_type);
}

TEST(EmulatedDriverExchange, TwoGb300NodesOfOneDomainShareFabricHandles) {
  expect_exchanged(R"(
hosts:
  - {name: gb300, count: 2, gpus: 4, gpu_model: GB300, nvlink_domain: nvl72-a, imex_channel: true, fabric_attribute: true}
layout: {tp: 8, dp: 1}
)",
                   8, "fabric");
}

TEST(EmulatedDriverExchange, EightRanksOnOneB300SharePosixFds) {
  expect_exchanged(R"(
hosts:
  - {name: b300-0, gpus: 8, gpu_model: B300}
layout: {tp: 8, dp: 1}
)",
                   8, "posix_fd");
}

TEST(EmulatedDriverExchange, RanksSharingAGpuSharePosixFds) {
  expect_exchanged(R"(
hosts:
  - {name: h200-0, gpus: 2, gpu_model: H200, ranks_per_gpu: 2}
layout: {tp: 4, dp: 1}
)",
                   4, "posix_fd", " --ranks-per-gpu 2");
}

TEST(EmulatedDriverExchange, TwoHostsWithoutImexFailBeforeAnyImportNamingTheHosts) {
  auto world = make_emulated_world(R"(
hosts:
  - {name: h200, count: 2, gpus: 4, gpu_model: H200, nvlink_domain: nvl-h200, fabric_attribute: true, imex_channel: false}
layout: {tp: 8, dp: 1}
)");
  ASSERT_TRUE(world.is_ok()) << world.status().to_string();
  const auto run = run_emulated_ranks(**world, fmt::format("exchange --bytes {} --expect refused", kShardBytes));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(count(run.output, "EXCHANGE REFUSED: failed_precondition"), 8u) << run.output;
  for (const char* words : {"spans 2 hosts", "IMEX channel missing on", "h200-0", "h200-1"})
    EXPECT_EQ(count(run.output, words) >= 8, true) << words << "\n" << run.output;
  // Refused at the agreement, before anyone created, exported or imported.
  EXPECT_EQ(count(run.output, "cuMemImportFromShareableHandle"), 0u) << run.output;
  EXPECT_EQ(count(run.output, "NOTHING LEFT"), 8u) << run.output;
  const EmulatorOutcome sim = on_the_emulator((*world)->deployment);
  ASSERT_FALSE(sim.first_failure.is_ok());
  EXPECT_EQ(sim.first_failure.code(), ErrorCode::kFailedPrecondition);
  for (const char* words : {"spans 2 hosts", "IMEX channel missing on", "h200-0", "h200-1"})
    EXPECT_NE(sim.first_failure.message().find(words), std::string::npos) << sim.first_failure.to_string();
}

TEST(EmulatedDriverExchange, Nvl72RackWithAnImportFaultFailsEveryRankAndLeavesNothing) {
  const std::string yaml = R"(
hosts:
  - {name: nvl72-node, count: 18, gpus: 4, gpu_model: GB300, nvlink_domain: nvl72-rack0, imex_channel: true, fabric_attribute: true}
layout: {tp: 72, dp: 1}
)";
  auto world = make_emulated_world(yaml, {{.site = "import", .rank = 5, .nth = 1}});
  ASSERT_TRUE(world.is_ok()) << world.status().to_string();
  const auto run = run_emulated_ranks(**world, "exchange --bytes 2097152 --expect refused");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(count(run.output, "fault 'import' fired on rank 5"), 1u) << run.output;
  // Rank 5 meets the fault; every other rank learns it at the phase's
  // agreement and undoes its part.
  EXPECT_EQ(count(run.output, "EXCHANGE REFUSED: permission_denied (rank 5, peer"), 1u) << run.output;
  EXPECT_EQ(count(run.output, "EXCHANGE REFUSED: unavailable"), 71u) << run.output;
  EXPECT_EQ(count(run.output, "rank 5 failed at step import"), 71u) << run.output;
  EXPECT_EQ(count(run.output, "NOTHING LEFT"), 72u) << run.output;
  sim::FaultPlan faults;
  faults.plan(sim::FaultSite::kImport, 5);
  const EmulatorOutcome sim = on_the_emulator((*world)->deployment, faults);
  ASSERT_EQ(sim.statuses.size(), 72u);
  for (int r = 0; r < 72; ++r) {
    const Status& s = sim.statuses[static_cast<size_t>(r)];
    EXPECT_EQ(s.code(), r == 5 ? ErrorCode::kPermissionDenied : ErrorCode::kUnavailable) << s.to_string();
    if (r != 5) EXPECT_NE(s.message().find("rank 5 failed at step import"), std::string::npos) << s.to_string();
  }
}

// Drawn fault plans on real processes through the real backend: each seed
// draws a world (odd: one B300 host, POSIX fds; even: two GB300 hosts of one
// domain, FABRIC), a site (export, import, map, access, slow or none) and a
// rank; every rank's outcome (ok, or the error's kind) must equal the
// emulator's for the same plan, every armed site must fire, and nothing may be
// left in any rank. The real FABRIC probe exports once before the exchange
// (the emulator's probe does not), so on FABRIC worlds an export fault is
// armed at the second export, the exchange's own.
TEST(EmulatedDriverExchange, DrawnFaultsOver200SeedsMatchTheEmulatorAndLeaveNothing) {
  static const char* kSites[] = {"export", "import", "map", "access", "slow", "none"};
  std::map<std::string, int> fired;
  int failed_seeds = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const bool posix = seed % 2 == 1;
    const std::string site = kSites[splitmix64_at(seed, 0) % std::size(kSites)];
    const int rank = static_cast<int>(splitmix64_at(seed, 1) % 2);
    const std::string yaml =
        posix ? "hosts:\n  - {name: b300-0, gpus: 2, gpu_model: B300}\nlayout: {tp: 2, dp: 1}\n"
              : "hosts:\n  - {name: gb300, count: 2, gpus: 1, gpu_model: GB300, nvlink_domain: nvl72-a, "
                "imex_channel: true, fabric_attribute: true}\nlayout: {tp: 2, dp: 1}\n";
    std::vector<emulated::WorldFault> armed;
    sim::FaultPlan plan;
    if (site != "none") {
      armed.push_back({.site = site, .rank = rank, .nth = site == "export" && !posix ? 2 : 1, .delay_ms = 20});
      const std::map<std::string, sim::FaultSite> sim_site = {{"export", sim::FaultSite::kExport},
                                                              {"import", sim::FaultSite::kImport},
                                                              {"map", sim::FaultSite::kMap},
                                                              {"access", sim::FaultSite::kAccess}};
      if (sim_site.count(site)) plan.plan(sim_site.at(site), rank);
    }
    auto world = make_emulated_world(yaml, armed);
    ASSERT_TRUE(world.is_ok()) << world.status().to_string();
    const auto run = run_emulated_ranks(**world, "exchange --bytes 2097152 --expect refused");
    const EmulatorOutcome sim = on_the_emulator((*world)->deployment, plan);
    bool seed_ok = count(run.output, "NOTHING LEFT") == 2 && run.exit_code == 0;
    if (site != "none") {
      const bool did_fire = count(run.output, "fault '" + site + "' fired on rank " + std::to_string(rank)) == 1;
      seed_ok &= did_fire;
      fired[site] += did_fire;
    }
    for (int r = 0; r < 2 && r < static_cast<int>(sim.statuses.size()); ++r) {
      const Status& expected = sim.statuses[static_cast<size_t>(r)];
      const std::string word = expected.is_ok() ? "EXCHANGE OK" : std::string("EXCHANGE REFUSED: ") +
                                                                      error_code_name(expected.code());
      seed_ok &= std::regex_search(run.output, std::regex("rank " + std::to_string(r) + ": [^\n]*" + word));
    }
    if (!seed_ok) {
      ++failed_seeds;
      ADD_FAILURE() << "seed " << seed << " (" << (posix ? "posix" : "fabric") << ", fault " << site << " on rank "
                    << rank << "):\n" << run.output;
    }
  }
  EXPECT_EQ(failed_seeds, 0);
  for (const char* site : kSites)
    if (std::string(site) != "none") EXPECT_GT(fired[site], 0) << site << " never fired";
}

}  // namespace
}  // namespace engram
