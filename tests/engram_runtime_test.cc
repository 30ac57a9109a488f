// The runtime on the emulator: the placement each topology gets at run time
// matches `plan`, every placement returns the same bytes, and a failed start
// leaves nothing in the ledger.
#include "core/runtime/engram_runtime.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <unordered_set>

#include "core/base/bf16.h"
#include "core/placements/host_shared.h"
#include "core/plan/deployment_plan.h"
#include "core/runtime/plan_inputs.h"
#include "core/model/hashing.h"
#include "core/base/units.h"
#include "kernels/gather_reference.h"
#include "core/model/row_format.h"
#include "core/model/table_fill.h"
#include "sim/world.h"

namespace engram {
namespace {

ModelSpec tiny() { return model_preset("tiny").value(); }

struct Outcome {
  sim::WorldRun run;
  std::vector<Placement> placements;
  std::vector<RuntimeFacts> facts;             // per rank, as started
  std::vector<std::vector<uint16_t>> outputs;  // per rank, table 0
  std::vector<std::vector<int64_t>> ids;       // per rank
  std::vector<Warning> warnings;
};

// Runs start + one lookup of table 0 + stop on every rank.
Outcome run_runtime(std::vector<HostSpec> hosts, ParallelLayout layout, EngramConfig config, uint64_t seed,
                    sim::FaultPlan faults = {}, uint64_t host_fill_chunk_bytes = 1ull << 30,
                    std::function<int(int rank)> table_index_of = [](int) { return 0; }) {
  sim::WorldSpec spec;
  spec.hosts = std::move(hosts);
  spec.seed = seed;
  spec.faults = std::move(faults);
  Outcome out;
  const int world = layout.world_size();
  out.placements.resize(static_cast<size_t>(world));
  out.facts.resize(static_cast<size_t>(world));
  out.outputs.resize(static_cast<size_t>(world));
  out.ids.resize(static_cast<size_t>(world));
  WarningSink sink;
  RuntimeOptions options;
  options.placement_model = "deepseek-v4.1-flash";
  options.table_model = tiny();
  options.layout = layout;
  options.config = config;
  options.host_fill_chunk_bytes = host_fill_chunk_bytes;
  auto run = sim::run_world(spec, [&](RankBackend& backend) -> Status {
    const int r = backend.world_rank;
    ENGRAM_ASSIGN_OR_RETURN(auto runtime, EngramRuntime::start(backend, options, sink));
    out.placements[static_cast<size_t>(r)] = runtime->placement();
    out.facts[static_cast<size_t>(r)] = runtime->facts();
    const TableSpec& table = options.table_model.tables[0];
    // Rank r brings r % 3 tokens (0 is an idle replica), some DEAD, one past the table.
    const int tokens = r % 3;
    auto& ids = out.ids[static_cast<size_t>(r)];
    for (int t = 0; t < tokens; ++t)
      for (int h = 0; h < table.head_count(); ++h)
        ids.push_back(h == 0 && t == 1 ? kDeadId : (h == 1 ? table.row_count() + 5 : (r * 7919 + t * 31 + h * 101) % table.row_count()));
    auto& output = out.outputs[static_cast<size_t>(r)];
    output.assign(ids.size() * static_cast<size_t>(table.dim), 0xdead);
    Status looked = runtime->lookup(table_index_of(r), ids, 4, output);
    Status stopped = runtime->stop();
    ENGRAM_RETURN_IF_ERROR(looked);
    return stopped;
  });
  EXPECT_TRUE(run.is_ok()) << run.status().to_string();
  out.run = std::move(run).value();
  out.warnings = sink.warnings();
  return out;
}

// The direct dequantised lookup against the whole table.
void expect_direct_lookup_equal(const Outcome& out) {
  const ModelSpec model = tiny();
  const TableSpec& table = model.tables[0];
  std::vector<std::byte> whole(table.table_bytes());
  fill_table_rows(table, 1, 0, whole);
  for (size_t r = 0; r < out.ids.size(); ++r) {
    const auto& ids = out.ids[r];
    std::vector<uint16_t> expected(ids.size() * static_cast<size_t>(table.dim));
    for (size_t i = 0; i < ids.size(); ++i) {
      std::span<uint16_t> dst(expected.data() + i * table.dim, static_cast<size_t>(table.dim));
      if (ids[i] < 0 || ids[i] >= table.row_count()) continue;
      dequantize_row(table,
                     std::span<const std::byte>(whole).subspan(static_cast<size_t>(ids[i]) * table.row_bytes(),
                                                               table.row_bytes()),
                     dst);
      for (auto& v : dst) v = bf16_lookup_canonical(v);
    }
    ASSERT_EQ(expected.size(), out.outputs[r].size());
    for (size_t i = 0; i < expected.size(); ++i)
      ASSERT_TRUE(bf16_same(expected[i], out.outputs[r][i])) << "rank " << r << " value " << i;
  }
}

HostSpec host(std::string name, int gpus, uint64_t tmpfs_bytes, std::string domain = "") {
  HostSpec h;
  h.name = std::move(name);
  h.gpu_count = gpus;
  h.gpu_model = "GB200";
  h.tmpfs_bytes_total = tmpfs_bytes;
  h.nvlink_domain = std::move(domain);
  return h;
}

// The plans kept with one set of facts are keyed by the plan's inputs:
// changing any one field of them gives another key (another equality,
// another hash, another plan).
// The bindings below stop compiling when a field is added, so this list
// grows with the structs (as the hash's own bindings make it).
TEST(PlanInputs, EveryFieldTellsTwoInputsApart) {
  const PlanInputs base;
  {
    [[maybe_unused]] const auto& [placement_model, layout, config, engine] = base;
    [[maybe_unused]] const auto& [tp, dp, ep, elastic_ep, prefill_cp, extra_ranks] = base.layout;
    [[maybe_unused]] const auto& [cpu_offload, peer_shards, dp_shared_memory, shard_group, tokens, sp, placement,
                                  offload_given, across_dp, thp, host_layout] = base.config;
    [[maybe_unused]] const auto& [fraction, reserved, from_model, fraction_given, context, negative_kv, profile,
                                  variant] =
        base.engine;
  }
  const std::vector<std::pair<std::string, std::function<void(PlanInputs&)>>> changes = {
      {"placement_model", [](PlanInputs& i) { i.placement_model = "deepseek-v4.1-pro"; }},
      {"layout.tp", [](PlanInputs& i) { i.layout.tp = 2; }},
      {"layout.dp", [](PlanInputs& i) { i.layout.dp = 2; }},
      {"layout.ep", [](PlanInputs& i) { i.layout.ep = 2; }},
      {"layout.elastic_ep", [](PlanInputs& i) { i.layout.elastic_ep = true; }},
      {"layout.prefill_cp", [](PlanInputs& i) { i.layout.prefill_cp = 2; }},
      {"layout.extra_ranks", [](PlanInputs& i) { i.layout.extra_ranks = 4; }},
      {"config.cpu_offload", [](PlanInputs& i) { i.config.cpu_offload = true; }},
      {"config.peer_shards", [](PlanInputs& i) { i.config.peer_shards = true; }},
      {"config.dp_shared_memory true", [](PlanInputs& i) { i.config.dp_shared_memory = true; }},
      {"config.dp_shared_memory false", [](PlanInputs& i) { i.config.dp_shared_memory = false; }},
      {"config.shard_group nvlink_domain", [](PlanInputs& i) { i.config.shard_group = ShardGroup::kNvlinkDomain; }},
      {"config.shard_group host", [](PlanInputs& i) { i.config.shard_group = ShardGroup::kHost; }},
      {"config.tokens_per_rank_max", [](PlanInputs& i) { i.config.tokens_per_rank_max = 2048; }},
      {"config.sequence_parallel", [](PlanInputs& i) { i.config.sequence_parallel = true; }},
      {"config.placement", [](PlanInputs& i) { i.config.placement = "sglang_private"; }},
      {"config.cpu_offload_given", [](PlanInputs& i) { i.config.cpu_offload_given = true; }},
      {"config.embedding_across_dp", [](PlanInputs& i) { i.config.embedding_across_dp = true; }},
      {"config.thp_packing", [](PlanInputs& i) { i.config.thp_packing = true; }},
      {"config.host_layout", [](PlanInputs& i) { i.config.host_layout = "private"; }},
      {"engine.gpu_memory_fraction", [](PlanInputs& i) { i.engine.gpu_memory_fraction = 0.5; }},
      {"engine.gpu_reserved_bytes", [](PlanInputs& i) { i.engine.gpu_reserved_bytes = 1; }},
      {"engine.reserved_from_model", [](PlanInputs& i) { i.engine.reserved_from_model = true; }},
      {"engine.fraction_given", [](PlanInputs& i) { i.engine.fraction_given = true; }},
      {"engine.context_length_tokens", [](PlanInputs& i) { i.engine.context_length_tokens = 4096; }},
      {"engine.negative_kv_allowed", [](PlanInputs& i) { i.engine.negative_kv_allowed = true; }},
      {"engine.profile vllm", [](PlanInputs& i) { i.engine.profile = EngineId::kVllm; }},
      {"engine.profile sglang", [](PlanInputs& i) { i.engine.profile = EngineId::kSglang; }},
      {"engine.variant", [](PlanInputs& i) { i.engine.variant = "sp-all-to-all"; }},
  };
  const PlanInputsHash hash;
  std::unordered_set<PlanInputs, PlanInputsHash> entries = {base};
  for (const auto& [field, change] : changes) {
    PlanInputs changed = base;
    change(changed);
    EXPECT_FALSE(changed == base) << field;
    EXPECT_NE(hash(changed), hash(base)) << field;
    EXPECT_TRUE(entries.insert(changed).second) << field << " collides with an earlier entry";
    PlanInputs same = changed;
    EXPECT_TRUE(same == changed) << field;
    EXPECT_EQ(hash(same), hash(changed)) << field;
  }
  EXPECT_EQ(entries.size(), changes.size() + 1);
  // From the options: exactly the three parts, nothing else of them.
  RuntimeOptions options;
  options.placement_model = "tiny";
  options.layout.tp = 4;
  options.config.peer_shards = true;
  options.job_id = "another job";
  options.fill_seed = 7;
  const PlanInputs of = PlanInputs::of(options);
  EXPECT_EQ(of.placement_model, "tiny");
  EXPECT_EQ(of.layout, options.layout);
  EXPECT_EQ(of.config, options.config);
}

TEST(EngramRuntime, Dep4WithLargeShmSharesOneCopyPerNode) {
  ParallelLayout layout{1, 4};
  EngramConfig config;
  config.cpu_offload = true;
  auto out = run_runtime({host("gb200-0", 4, 190 * kGiB)}, layout, config, 1);
  ASSERT_TRUE(out.run.all_ok()) << out.run.summary();
  for (Placement p : out.placements) EXPECT_EQ(p, Placement::kHostShared);
  EXPECT_TRUE(out.warnings.empty());
  EXPECT_TRUE(out.run.leaks.empty());
  expect_direct_lookup_equal(out);
}

TEST(EngramRuntime, Dep4WithDockerDefaultShmFallsBackWithOneWarning) {
  ParallelLayout layout{1, 4};
  EngramConfig config;
  config.cpu_offload = true;
  auto out = run_runtime({host("gb200-0", 4, 64 * kMiB)}, layout, config, 2);
  ASSERT_TRUE(out.run.all_ok()) << out.run.summary();
  for (Placement p : out.placements) EXPECT_EQ(p, Placement::kHostHeadSharded);
  ASSERT_EQ(out.warnings.size(), 1u);  // four ranks, two layers: one warning
  EXPECT_NE(out.warnings[0].text.find("188.8 GiB"), std::string::npos) << out.warnings[0].text;
  EXPECT_NE(out.warnings[0].text.find("--shm-size"), std::string::npos);
  EXPECT_NE(out.warnings[0].text.find("--ipc=host"), std::string::npos);
  EXPECT_TRUE(out.run.leaks.empty());
  expect_direct_lookup_equal(out);
}

TEST(EngramRuntime, ExplicitTrueWithSmallShmFailsOnEveryRankWithTheSizes) {
  ParallelLayout layout{1, 4};
  EngramConfig config;
  config.cpu_offload = true;
  config.dp_shared_memory = true;
  auto out = run_runtime({host("gb200-0", 4, 64 * kMiB)}, layout, config, 3);
  ASSERT_EQ(out.run.failed_rank_count(), 4);
  for (const Status& s : out.run.statuses) {
    EXPECT_EQ(s.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("188.8 GiB"), std::string::npos) << s.to_string();
  }
  EXPECT_TRUE(out.run.leaks.empty());
}

TEST(EngramRuntime, EveryPlacementReturnsTheDirectLookupBytes) {
  struct Case { const char* name; bool offload; bool peer; std::optional<bool> shared; uint64_t tmpfs; Placement want; };
  const Case cases[] = {
      {"device_collective", false, false, std::nullopt, 190 * kGiB, Placement::kDeviceCollective},
      {"device_peer", false, true, std::nullopt, 190 * kGiB, Placement::kDevicePeer},
      {"host_shared", true, false, std::nullopt, 190 * kGiB, Placement::kHostShared},
      {"host_head_sharded", true, false, std::nullopt, 64 * kMiB, Placement::kHostHeadSharded},
      {"host_private", true, false, false, 190 * kGiB, Placement::kHostPrivate},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ParallelLayout layout{1, 6};
    EngramConfig config;
    config.cpu_offload = c.offload;
    config.peer_shards = c.peer;
    config.dp_shared_memory = c.shared;
    auto out = run_runtime({host("b300-0", 6, c.tmpfs)}, layout, config, 17);
    ASSERT_TRUE(out.run.all_ok()) << out.run.summary();
    for (Placement p : out.placements) EXPECT_EQ(p, c.want);
    EXPECT_TRUE(out.run.leaks.empty());
    expect_direct_lookup_equal(out);
    // The host phases' times: a rank that filled host rows says how long it
    // took, and how long registering them with its device took; device
    // placements fill no host rows. host_shared: only the node's writer fills.
    int fillers = 0;
    for (const RuntimeFacts& f : out.facts) {
      EXPECT_GE(f.host_fill_seconds, 0.0);
      if (f.host_fill_seconds > 0) ++fillers;
      if (c.offload) EXPECT_GT(f.device_register_seconds, 0.0) << "every rank registers its host rows";
      else EXPECT_EQ(f.device_register_seconds, 0.0);
    }
    const int want_fillers = !c.offload ? 0 : c.want == Placement::kHostShared ? 1 : 6;
    EXPECT_EQ(fillers, want_fillers);
  }
}

// One rank asks for a table the model does not have, or for another table
// than its group: nobody waits forever. That rank gets its bad index; in the
// placements whose lookup is a group collective every other rank of the
// group fails the step too, naming it (their rows would have come from the
// wrong table); elsewhere the others are untouched.
TEST(EngramRuntime, ARankAskingForAnotherTableFailsTheStepOnItsGroupInsteadOfHanging) {
  struct Case { const char* name; bool offload; bool peer; std::optional<bool> shared; uint64_t tmpfs; bool collective; };
  const Case cases[] = {
      {"device_collective", false, false, std::nullopt, 190 * kGiB, true},
      {"device_peer", false, true, std::nullopt, 190 * kGiB, false},
      {"host_shared", true, false, std::nullopt, 190 * kGiB, false},
      {"host_head_sharded", true, false, std::nullopt, 64 * kMiB, true},
      {"host_private", true, false, false, 190 * kGiB, false},
  };
  ASSERT_GE(tiny().tables.size(), 2u);
  for (const Case& c : cases) {
    for (const int odd_index : {99, -1, 1}) {
      SCOPED_TRACE(fmt::format("{}, rank 2 asks for table {}", c.name, odd_index));
      EngramConfig config;
      config.cpu_offload = c.offload;
      config.peer_shards = c.peer;
      config.dp_shared_memory = c.shared;
      auto out = run_runtime({host("b300-0", 6, c.tmpfs)}, ParallelLayout{1, 6}, config, 23, {}, 1ull << 30,
                             [&](int r) { return r == 2 ? odd_index : 0; });
      ASSERT_EQ(out.run.statuses.size(), 6u);
      EXPECT_TRUE(out.run.leaks.empty());
      const bool valid = odd_index == 1;
      for (int r = 0; r < 6; ++r) {
        const Status& s = out.run.statuses[static_cast<size_t>(r)];
        if (r == 2 && !valid) {
          EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
          EXPECT_NE(s.message().find(fmt::format("table index {} is out of range", odd_index)), std::string::npos)
              << s.to_string();
          EXPECT_EQ(s.context().rank, 2);
        } else if (c.collective && (r != 2 || valid)) {
          EXPECT_EQ(s.code(), ErrorCode::kFailedPrecondition) << "rank " << r << ": " << s.to_string();
          EXPECT_NE(s.message().find("must look up the same table"), std::string::npos) << s.to_string();
          EXPECT_EQ(s.context().rank, r);
          if (r != 2) {
            EXPECT_EQ(s.context().peer, 2) << s.to_string();
          }
        } else {
          EXPECT_TRUE(s.is_ok()) << "rank " << r << ": " << s.to_string();
        }
      }
    }
  }
}

TEST(EngramRuntime, ShmCreateFaultLeavesNothingAndNamesTheWriter) {
  ParallelLayout layout{1, 4};
  EngramConfig config;
  config.cpu_offload = true;
  sim::FaultPlan faults;
  faults.plan(sim::FaultSite::kShmCreate, 0);
  auto out = run_runtime({host("gb200-0", 4, 190 * kGiB)}, layout, config, 5, faults);
  ASSERT_EQ(out.run.failed_rank_count(), 4) << out.run.summary();
  EXPECT_EQ(out.run.statuses[0].context().step, "shm_create");
  for (int r = 1; r < 4; ++r) EXPECT_EQ(out.run.statuses[static_cast<size_t>(r)].context().peer, 0);
  EXPECT_TRUE(out.run.leaks.empty()) << out.run.summary();
  EXPECT_EQ(out.run.faults.fired(sim::FaultSite::kShmCreate), 1u);
}

// DEP4 on one GB200 host with room in /dev/shm: host_shared, tiny tables.
struct Dep4HostShared {
  sim::WorldSpec spec;
  RuntimeOptions options;
  Dep4HostShared() {
    spec.hosts = {host("gb200-0", 4, 190 * kGiB)};
    spec.seed = 23;
    options.table_model = tiny();
    options.layout = ParallelLayout{1, 4};
    options.config.cpu_offload = true;
  }
};

// The part of the names no other user can guess is 16 lowercase hex
// (core/backend/host_shared_memory.h): anything else (the job id, say) is
// refused at the start on every rank, before a name is made.
TEST(EngramRuntime, AShmNamePartThatIsNotSixteenHexIsRefusedAtTheStart) {
  Dep4HostShared dep4;
  sim::WorldSpec& spec = dep4.spec;
  RuntimeOptions& options = dep4.options;
  options.shm_name_part = "job";
  WarningSink sink;
  auto run = sim::run_world(spec, [&](RankBackend& backend) -> Status {
    auto runtime = EngramRuntime::start(backend, options, sink);
    if (runtime.is_ok()) return internal_error("start must refuse the name part");
    if (runtime.status().code() != ErrorCode::kInvalidArgument ||
        runtime.status().message().find("shm_name_part 'job' is not 16 lowercase hex") == std::string::npos)
      return runtime.status();
    return Status::ok();
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
}

TEST(EngramRuntime, AWriterNeverUnlinksASegmentItFoundTaken) {
  // A segment of the job's name already exists (a live run's, or a stale one
  // the operator must look at): the start fails on every rank, and the
  // segment is still there afterwards.
  Dep4HostShared dep4;
  sim::WorldSpec& spec = dep4.spec;
  RuntimeOptions& options = dep4.options;
  WarningSink sink;
  const std::string taken = host_table_segment_name(options.job_id, options.shm_name_part, 14);
  auto run = sim::run_world(spec, [&](RankBackend& backend) -> Status {
    std::unique_ptr<ShmMapping> squatter;
    if (backend.world_rank == 0) {
      ENGRAM_ASSIGN_OR_RETURN(squatter, backend.shm->create(taken, 4096));
    }
    auto runtime = EngramRuntime::start(backend, options, sink);
    if (runtime.is_ok()) return internal_error("start must fail: the segment name is taken");
    if (backend.world_rank == 0) {
      if (runtime.status().code() != ErrorCode::kAlreadyExists) return runtime.status();
      auto still_there = backend.shm->open_read_only(taken, 4096);
      if (!still_there.is_ok()) return internal_error("the taken segment was unlinked: " + still_there.status().to_string());
      still_there.value().reset();
      squatter.reset();
      return backend.shm->unlink(taken);
    }
    if (runtime.status().context().peer != 0) return runtime.status();
    return Status::ok();
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty()) << run->summary();
}

TEST(EngramRuntime, AChunkedHostFillWritesEveryRow) {
  // 1000-byte chunks (15 rows of 66 B, the last chunk short, many
  // agreements): every rank reads every row of both tables and gets the
  // direct lookup's bytes.
  sim::WorldSpec spec;
  spec.hosts = {host("gb200-0", 4, 190 * kGiB)};
  spec.seed = 31;
  RuntimeOptions options;
  options.table_model = tiny();
  options.layout = ParallelLayout{1, 4};
  options.config.cpu_offload = true;
  options.host_fill_chunk_bytes = 1000;
  WarningSink sink;
  auto run = sim::run_world(spec, [&](RankBackend& backend) -> Status {
    ENGRAM_ASSIGN_OR_RETURN(auto runtime, EngramRuntime::start(backend, options, sink));
    if (runtime->placement() != Placement::kHostShared) return internal_error("expected host_shared");
    for (int t = 0; t < static_cast<int>(options.table_model.tables.size()); ++t) {
      const TableSpec& table = options.table_model.tables[static_cast<size_t>(t)];
      // Every row once, padded with DEAD to whole tokens.
      std::vector<int64_t> ids;
      for (int64_t row = 0; row < table.row_count(); ++row) ids.push_back(row);
      while (ids.size() % static_cast<size_t>(table.head_count()) != 0) ids.push_back(kDeadId);
      std::vector<uint16_t> out(ids.size() * static_cast<size_t>(table.dim));
      ENGRAM_RETURN_IF_ERROR(
          runtime->lookup(t, ids, static_cast<int64_t>(ids.size()) / table.head_count(), out));
      std::vector<std::byte> whole(table.table_bytes());
      fill_table_rows(table, options.fill_seed, 0, whole);
      std::vector<uint16_t> want(static_cast<size_t>(table.dim));
      for (int64_t row = 0; row < table.row_count(); ++row) {
        dequantize_row(table,
                       std::span<const std::byte>(whole).subspan(static_cast<size_t>(row) * table.row_bytes(),
                                                                 table.row_bytes()),
                       want);
        for (size_t k = 0; k < want.size(); ++k)
          if (!bf16_same(bf16_lookup_canonical(want[k]), out[static_cast<size_t>(row) * want.size() + k]))
            return internal_error("table " + std::to_string(t) + " row " + std::to_string(row) + " differs");
      }
    }
    return runtime->stop();
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty()) << run->summary();
}

TEST(EngramRuntime, TwoHostsShareOneCopyEach) {
  ParallelLayout layout{1, 8};
  EngramConfig config;
  config.cpu_offload = true;
  auto out = run_runtime({host("gb200-0", 4, 190 * kGiB), host("gb200-1", 4, 190 * kGiB)}, layout, config, 9);
  ASSERT_TRUE(out.run.all_ok()) << out.run.summary();
  for (Placement p : out.placements) EXPECT_EQ(p, Placement::kHostShared);
  expect_direct_lookup_equal(out);
}

}  // namespace
}  // namespace engram
