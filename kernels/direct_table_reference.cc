#include "kernels/direct_table_reference.h"

#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "core/lookup/shard_layout.h"
#include "core/base/status.h"
#include "core/model/table_fill.h"
#include "kernels/gather_reference.h"

namespace engram::kernels {

void DirectTables::lookup(int table, const TableSpec& decoded_as, std::span<const int64_t> ids,
                          std::span<uint16_t> out) const {
  ENGRAM_CHECK(table >= 0 && table < static_cast<int>(whole.size()));
  TableSpec spec = model.tables[static_cast<size_t>(table)];
  ENGRAM_CHECK(decoded_as.layer_id == spec.layer_id && decoded_as.primes == spec.primes &&
               decoded_as.row_format == spec.row_format && decoded_as.dim == spec.dim);
  spec.scale_byte_rule = decoded_as.scale_byte_rule;
  spec.minus_zero = decoded_as.minus_zero;
  RowShardLayout layout(spec.row_count(), 1);
  std::span<const std::byte> shard(whole[static_cast<size_t>(table)]);
  gather_peer_reference(spec, layout, std::span<const std::span<const std::byte>>(&shard, 1), ids, out);
}

const DirectTables& direct_tables(const std::string& key, const ModelSpec& model, uint64_t fill_seed) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, uint64_t>, std::unique_ptr<DirectTables>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& entry = cache[{key, fill_seed}];
  if (!entry) {
    entry = std::make_unique<DirectTables>();
    entry->model = model;
    entry->fill_seed = fill_seed;
    for (size_t t = 0; t < model.tables.size(); ++t) {
      const TableSpec& spec = entry->model.tables[t];
      entry->whole.emplace_back(spec.table_bytes());
      fill_table_rows(spec, fill_seed, 0, entry->whole.back());
      auto hasher = TableHasher::create(entry->model, static_cast<int>(t));
      ENGRAM_CHECK(hasher.is_ok());
      entry->hashers.push_back(std::move(hasher).value());
    }
  }
  // The key fixes the structure and the token space; a different spec under the same key is a broken contract.
  ENGRAM_CHECK(entry->model.tables.size() == model.tables.size() && entry->model.seed == model.seed &&
               entry->model.compressed_vocab_size == model.compressed_vocab_size &&
               entry->model.pad_id == model.pad_id && entry->model.dead_token_rule == model.dead_token_rule);
  return *entry;
}

}  // namespace engram::kernels
