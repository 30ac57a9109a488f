// Properties over random small tables (docs/design.md section 4): all five
// placements return bitwise-identical rows (NaN as NaN), equal to a direct
// dequantised lookup against the whole table, whatever the head count, prime
// sizes, row format, group size, token counts and ids (DEAD, out of range,
// another head's bucket). Sizes stay small so the run takes seconds.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "core/model/hashing.h"
#include "kernels/gather_reference.h"
#include "tests/lookup_test_support.h"

namespace engram {
namespace {

struct Case {
  ModelSpec model;
  int group = 1;
  int64_t slot = 1;
  std::vector<std::vector<int64_t>> ids;  // by rank
  uint64_t fill_seed = 0;
};

rc::Gen<ModelSpec> gen_model() {
  return rc::gen::exec([] {
    const int64_t vocab = *rc::gen::inRange<int64_t>(2, 300);
    std::vector<int> orders;
    const int order_count = *rc::gen::inRange(1, 4);
    // Distinct orders, as models have them (a repeated order is refused).
    for (int i = 0; i < order_count; ++i) orders.push_back((orders.empty() ? 0 : orders.back()) + *rc::gen::inRange(1, 3));
    const int heads_per_order = *rc::gen::inRange(1, 5);
    const bool fp8 = *rc::gen::arbitrary<bool>();
    const int dim = fp8 ? 32 * *rc::gen::inRange(1, 3) : *rc::gen::inRange(1, 10);
    auto spec = make_model_spec("prop", vocab, {*rc::gen::inRange(0, 40)}, orders, heads_per_order,
                                fp8 ? RowFormat::kFp8E4M3Ue8m0 : RowFormat::kBf16, dim,
                                *rc::gen::arbitrary<uint64_t>());
    RC_ASSERT(spec.is_ok());
    // Any token space: a compressed vocabulary smaller or larger than the
    // tables, any pad id in it, any DEAD rule.
    spec->compressed_vocab_size = *rc::gen::inRange<int64_t>(1, 1000);
    spec->pad_id = *rc::gen::inRange<int64_t>(0, spec->compressed_vocab_size);
    spec->dead_token_rule = static_cast<DeadTokenRule>(*rc::gen::inRange(0, 3));  // barrier, no-row, literal
    RC_ASSERT(validate(*spec).is_ok());
    return *spec;
  });
}

rc::Gen<int64_t> gen_id(const TableSpec& table, int head) {
  const int64_t rows = table.row_count();
  const int64_t begin = table.head_offset(head);
  const int64_t prime = table.primes[static_cast<size_t>(head)];
  return rc::gen::weightedOneOf<int64_t>({
      {6, rc::gen::inRange<int64_t>(begin, begin + prime)},    // what hashing makes
      {2, rc::gen::just(int64_t{kDeadId})},
      {1, rc::gen::inRange<int64_t>(0, rows)},                 // any row, often another head's bucket
      {1, rc::gen::inRange<int64_t>(rows, rows + 1000)},       // past the table
      {1, rc::gen::inRange<int64_t>(-1000, -1)},               // negative, not DEAD
      {1, rc::gen::element<int64_t>(0, rows - 1)},             // the edges
  });
}

RC_GTEST_PROP(LookupProperty, EveryPlacementEqualsTheDirectLookup, ()) {
  const ModelSpec model = *gen_model();
  const TableSpec& table = model.tables[0];
  const int group = *rc::gen::inRange(1, 9);
  const int64_t slot = *rc::gen::inRange<int64_t>(1, 5);
  std::vector<std::vector<int64_t>> ids(static_cast<size_t>(group));
  for (auto& rank_ids : ids) {
    const int64_t tokens = *rc::gen::inRange<int64_t>(0, slot + 1);
    for (int64_t t = 0; t < tokens; ++t)
      for (int h = 0; h < table.head_count(); ++h) rank_ids.push_back(*gen_id(table, h));
  }
  const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
  const auto bytes = testing::filled_table(table, seed);
  RC_TAG(table.row_format == RowFormat::kBf16 ? "bf16" : "fp8",
         table.head_count() % group == 0 ? "heads divide group" : "uneven heads");

  for (size_t r = 0; r < ids.size(); ++r) {
    const auto want = testing::direct_lookup(table, bytes, ids[r]);
    // The peer kernel's reference, every rank reading every shard.
    const RowShardLayout layout(table.row_count(), group);
    std::vector<std::span<const std::byte>> views;
    for (int s = 0; s < group; ++s)
      views.push_back(std::span(bytes).subspan(static_cast<size_t>(layout.shard_begin(s)) * table.row_bytes(),
                                               static_cast<size_t>(layout.shard_rows(s)) * table.row_bytes()));
    std::vector<uint16_t> peer(want.size());
    kernels::gather_peer_reference(table, layout, views, ids[r], peer);
    RC_ASSERT(testing::first_difference(peer, want) == -1);
  }
  for (const PlacementOps& ops : placement_registry()) {
    const Placement placement = ops.id;
    auto run = testing::run_placement(placement, table, bytes, ids, slot, seed);
    for (size_t r = 0; r < ids.size(); ++r) {
      if (!run.statuses[r].is_ok()) RC_FAIL(std::string(placement_name(placement)) + ": " + run.statuses[r].to_string());
      const int64_t at = testing::first_difference(run.output[r], testing::direct_lookup(table, bytes, ids[r]));
      if (at != -1)
        RC_FAIL(std::string(placement_name(placement)) + " differs at value " + std::to_string(at) + " of rank " +
                std::to_string(r) + " (group " + std::to_string(group) + ")");
    }
  }
}

RC_GTEST_PROP(LookupProperty, HashIdsStayInTheirBucketsAndSequencesAreIndependent, ()) {
  const ModelSpec model = *gen_model();
  auto hasher = TableHasher::create(model, 0);
  RC_ASSERT(hasher.is_ok());
  const TableSpec& table = model.tables[0];
  const auto token_gen = rc::gen::weightedOneOf<int64_t>(
      {{5, rc::gen::inRange<int64_t>(0, model.compressed_vocab_size)}, {1, rc::gen::just(int64_t{kDeadId})}});
  const auto first = *rc::gen::container<std::vector<int64_t>>(token_gen);
  const auto second = *rc::gen::container<std::vector<int64_t>>(token_gen);
  const size_t heads = static_cast<size_t>(table.head_count());

  std::vector<int64_t> joined = first;
  joined.insert(joined.end(), second.begin(), second.end());
  std::vector<uint8_t> starts(joined.size(), 0);
  if (!second.empty()) starts[first.size()] = 1;
  std::vector<int64_t> ids(joined.size() * heads), ids_first(first.size() * heads), ids_second(second.size() * heads);
  RC_ASSERT(hasher->hash(joined, starts, ids).is_ok());
  RC_ASSERT(hasher->hash(first, {}, ids_first).is_ok());
  RC_ASSERT(hasher->hash(second, {}, ids_second).is_ok());
  std::vector<int64_t> separate = ids_first;
  separate.insert(separate.end(), ids_second.begin(), ids_second.end());
  RC_ASSERT(ids == separate);
  for (size_t t = 0; t < joined.size(); ++t)
    for (size_t h = 0; h < heads; ++h) {
      const int64_t id = ids[t * heads + h];
      if (joined[t] == kDeadId && model.dead_token_rule == DeadTokenRule::kBarrierNoRow) {
        RC_ASSERT(id == kDeadId);
      } else {
        RC_ASSERT(id >= table.head_offset(static_cast<int>(h)));
        RC_ASSERT(id < table.head_offset(static_cast<int>(h)) + table.primes[h]);
      }
    }
}

}  // namespace
}  // namespace engram
