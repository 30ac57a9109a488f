// Issue 47 point 2 through the runtime: every placement's lookup under an
// engine's profile writes a row's -0 (bf16 0x8000) as that engine does.
// vLLM gathers rows and never sums them, so -0 stays -0 on every path, the
// device reads of its host tables included (engramlab's collective over the
// members' rows combines them bit for bit there). SGLang keeps -0 at tp 1,
// on its shared host table and on its peer-read device shards, and loses it
// where its all-reduce sums the members' rows (device_collective and the
// per_rank layout over more than one rank). engramlab writes +0 everywhere.
// Each case runs on the emulator: host lookup and, where the placement has
// one, the device lookup, against rows decoded by the rule the case names.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "core/base/bf16.h"
#include "core/base/units.h"
#include "core/engines/engine_profile.h"
#include "core/model/row_format.h"
#include "core/model/table_fill.h"
#include "core/runtime/engram_runtime.h"
#include "sim/world.h"

namespace engram {
namespace {

struct MinusZeroCase {
  const char* name;
  const char* engine;  // as --engine takes it
  int tp = 1;
  int dp = 1;
  bool cpu_offload = false;
  std::optional<bool> dp_shared_memory;
  const char* host_layout = "";
  Placement placement;       // what the engine builds here
  bool minus_zero_kept;      // the engine's rule on this path
  const char* forced = "";   // config.placement: a placement the engine would not choose
};

// The whole table 0 of the tiny model, filled as every placement fills it.
struct FilledTable {
  TableSpec table = model_preset("tiny").value().tables[0];
  std::vector<std::byte> bytes = std::vector<std::byte>(table.table_bytes());
  FilledTable() { fill_table_rows(table, 1, 0, bytes); }

  std::vector<uint16_t> row(int64_t id, MinusZeroRule rule, ScaleByteRule scale_bytes = ScaleByteRule::kVllm) const {
    std::vector<uint16_t> out(static_cast<size_t>(table.dim), 0);
    if (id < 0 || id >= table.row_count()) return out;
    TableSpec decoded = table;
    decoded.minus_zero = rule;
    decoded.scale_byte_rule = scale_bytes;
    dequantize_row(decoded, std::span(bytes).subspan(static_cast<size_t>(id) * table.row_bytes(), table.row_bytes()),
                   out);
    return out;
  }
};

// Tokens whose id at each head is a row of that head's bucket holding a -0
// value (k-th such row for token k), then one token of DEAD and past-the-table
// ids: those stay +0 on every path.
std::vector<int64_t> ids_holding_minus_zero(const FilledTable& f, int tokens) {
  const TableSpec& t = f.table;
  std::vector<int64_t> ids;
  for (int k = 0; k < tokens; ++k)
    for (int h = 0; h < t.head_count(); ++h) {
      int found = 0;
      int64_t id = -1;
      for (int64_t r = t.head_offset(h); r < t.head_offset(h) + t.primes[static_cast<size_t>(h)] && id < 0; ++r) {
        const std::vector<uint16_t> values = f.row(r, MinusZeroRule::kKeep);
        if (std::count(values.begin(), values.end(), uint16_t{0x8000}) > 0 && found++ == k) id = r;
      }
      EXPECT_GE(id, 0) << "head " << h << " has fewer than " << k + 1 << " rows holding -0";
      ids.push_back(id);
    }
  for (int h = 0; h < t.head_count(); ++h) ids.push_back(h % 2 == 0 ? kDeadId : t.row_count() + h);
  return ids;
}

HostSpec one_host(int gpus) {
  HostSpec h;
  h.name = "gb200-0";
  h.gpu_count = gpus;
  h.gpu_model = "GB200";
  h.host_memory_bytes = 4ull << 40;
  h.tmpfs_bytes_total = 64 * kGiB;  // holds the tiny tables: dp_shared_memory can resolve enabled
  return h;
}

// Failures name the case, not its bytes.
void PrintTo(const MinusZeroCase& c, std::ostream* os) { *os << c.name; }

class EngineMinusZeroLookup : public ::testing::TestWithParam<MinusZeroCase> {};

TEST_P(EngineMinusZeroLookup, ARowHoldingMinusZeroComesBackAsTheEnginesRuleSays) {
  const MinusZeroCase& c = GetParam();
  const Result<EngineChoice> engine = parse_engine_choice(c.engine, "engine");
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  const FilledTable filled;
  const int tokens = 3;
  const std::vector<int64_t> ids = ids_holding_minus_zero(filled, tokens);
  const MinusZeroRule want_rule = c.minus_zero_kept ? MinusZeroRule::kKeep : MinusZeroRule::kWritePlusZero;
  std::vector<uint16_t> want;
  for (int64_t id : ids) {
    // Scale bytes 0 and 255 as the engine decodes them (point 3); -0 as the case says.
    const std::vector<uint16_t> row = filled.row(id, want_rule, engine_profile(engine->id, engine->variant).scale_byte_rule);
    want.insert(want.end(), row.begin(), row.end());
  }
  // The case can fail: the rows hold -0, and the rule decides what it becomes.
  ASSERT_GT(std::count(want.begin(), want.end(), uint16_t{c.minus_zero_kept ? 0x8000 : 0x0000}), 0);
  ASSERT_EQ(std::count(want.begin(), want.end(), uint16_t{0x8000}) > 0, c.minus_zero_kept);

  RuntimeOptions options;
  options.placement_model = "tiny";
  options.table_model = model_preset("tiny").value();
  options.layout.tp = c.tp;
  options.layout.dp = c.dp;
  options.config.cpu_offload = c.cpu_offload;
  options.config.cpu_offload_given = true;
  options.config.dp_shared_memory = c.dp_shared_memory;
  options.config.host_layout = c.host_layout;
  options.config.placement = c.forced;
  options.engine.profile = engine->id;
  options.engine.variant = engine->variant;

  sim::WorldSpec spec;
  spec.hosts = {one_host(c.tp * c.dp)};
  const int world = c.tp * c.dp;
  std::vector<Placement> placements(static_cast<size_t>(world));
  std::vector<std::vector<uint16_t>> host_out(static_cast<size_t>(world)), device_out(static_cast<size_t>(world));
  std::vector<bool> device_ready(static_cast<size_t>(world), false);
  WarningSink sink;
  auto run = sim::run_world(spec, [&](RankBackend& backend) -> Status {
    const size_t r = static_cast<size_t>(backend.world_rank);
    ENGRAM_ASSIGN_OR_RETURN(auto runtime, EngramRuntime::start(backend, options, sink));
    placements[r] = runtime->placement();
    // Every TP rank of a replica brings the replica's ids; every replica the same here.
    host_out[r].assign(want.size(), 0xdead);
    Status looked = runtime->lookup(0, ids, static_cast<int64_t>(ids.size()) / filled.table.head_count(), host_out[r]);
    // Ranks of a host placement whose device reads its table: the device read too.
    device_ready[r] = looked.is_ok() && !is_device_placement(runtime->placement()) && runtime->device_lookup_ready();
    if (device_ready[r]) {
      device_out[r].assign(want.size(), 0xbeef);
      looked = runtime->lookup_through_device(0, ids, static_cast<int64_t>(ids.size()) / filled.table.head_count(),
                                              device_out[r]);
    }
    Status stopped = runtime->stop();
    ENGRAM_RETURN_IF_ERROR(looked);
    return stopped;
  });
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  ASSERT_TRUE(run->all_ok()) << run->summary();
  for (size_t r = 0; r < static_cast<size_t>(world); ++r) {
    SCOPED_TRACE(fmt::format("rank {}", r));
    EXPECT_EQ(placements[r], c.placement) << placement_name(placements[r]);
    auto expect_rows = [&](const std::vector<uint16_t>& got, const char* path) {
      ASSERT_EQ(got.size(), want.size()) << path;
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_TRUE(bf16_same(got[i], want[i]))
            << path << ": value " << i << " (token " << i / (want.size() / (tokens + 1)) << ") 0x" << std::hex
            << got[i] << ", the engine's rule gives 0x" << want[i];
    };
    expect_rows(host_out[r], "host lookup");
    if (device_ready[r]) expect_rows(device_out[r], "the device's read of the host table");
  }
}

// The device read of a host table at tp 2, and of head shards over the
// Engram DP group, is engramlab's collective over the members' rows: vLLM
// keeps -0 there too, so the cases marked (*) fail where that collective sums.
const MinusZeroCase kCases[] = {
    {"engramlab_device_collective_tp2", "engramlab", 2, 1, false, {}, "", Placement::kDeviceCollective, false},
    {"engramlab_host_shared_tp2", "engramlab", 2, 2, true, {}, "", Placement::kHostShared, false},
    {"vllm_device_head_sharded_tp2", "vllm", 2, 1, false, {}, "", Placement::kDeviceHeadSharded, true},
    {"vllm_device_head_sharded_engram_dp2", "vllm", 1, 2, false, {}, "", Placement::kDeviceHeadSharded, true},
    {"vllm_host_shared_tp2", "vllm", 2, 2, true, {}, "", Placement::kHostShared, true},                     // (*)
    {"vllm_host_head_sharded_dp2", "vllm", 1, 2, true, false, "", Placement::kHostHeadSharded, true},     // (*)
    {"vllm_replica_copy_host_private_tp2", "vllm+replica-copy", 2, 1, true, false, "", Placement::kHostPrivate,
     true},                                                                                              // (*)
    {"sglang_device_collective_tp2", "sglang", 2, 1, false, {}, "", Placement::kDeviceCollective, false},
    {"sglang_device_collective_tp1", "sglang", 1, 1, false, {}, "", Placement::kDeviceCollective, true},
    {"sglang_symm_mem_device_peer_tp2", "sglang+symm-mem", 2, 1, false, {}, "", Placement::kDevicePeer, true},
    {"sglang_shared_tp2", "sglang", 2, 1, true, {}, "shared", Placement::kSglangShared, true},
    {"sglang_per_rank_tp2", "sglang", 2, 1, true, {}, "per_rank", Placement::kSglangPrivate, false},
    {"sglang_per_rank_tp1", "sglang", 1, 1, true, {}, "per_rank", Placement::kSglangPrivate, true},
    // SGLang's summing layout forced under vLLM's rule: its host all-reduce keeps -0 too. (*)
    {"vllm_forced_sglang_private_tp2", "vllm", 2, 1, true, false, "", Placement::kSglangPrivate, true,
     "sglang_private"},
};

INSTANTIATE_TEST_SUITE_P(PlacementsTimesEngines, EngineMinusZeroLookup, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<MinusZeroCase>& info) { return info.param.name; });

}  // namespace
}  // namespace engram
