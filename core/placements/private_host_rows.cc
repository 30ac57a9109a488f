#include "core/placements/private_host_rows.h"

#include <vector>

#include "core/model/table_fill.h"

namespace engram {
namespace {

class PrivateHostRows final : public PlacementTables {
 public:
  PrivateHostRows(Collectives& group, Collectives& tp_group, const ModelSpec& model, uint64_t fill_seed,
                  RowsHeld rows_held, LookupHeld lookup_held)
      : group_(group), tp_group_(tp_group), lookup_held_(lookup_held) {
    for (const TableSpec& spec : model.tables) {
      const RowRange rows = rows_held(spec, group, tp_group);
      ENGRAM_CHECK(rows.first_row >= 0 && rows.row_count >= 0 && rows.first_row + rows.row_count <= spec.row_count());
      std::vector<std::byte>& bytes = tables_.emplace_back(static_cast<size_t>(rows.row_count) * spec.row_bytes());
      fill_table_rows(spec, fill_seed, rows.first_row, bytes);
      footprint_.host_bytes += bytes.size();
    }
  }

  Status lookup(int table_index, const LookupRequest& request) override {
    return lookup_held_(group_, tp_group_, request, tables_[static_cast<size_t>(table_index)]);
  }

  Status release() override {
    tables_.clear();
    return Status::ok();
  }

 private:
  Collectives& group_;
  Collectives& tp_group_;
  LookupHeld lookup_held_;
  std::vector<std::vector<std::byte>> tables_;  // per table: the rows held
};

}  // namespace

std::unique_ptr<PlacementTables> build_private_host_rows(Collectives& group, Collectives& tp_group,
                                                         const ModelSpec& model, uint64_t fill_seed,
                                                         RowsHeld rows_held, LookupHeld lookup_held) {
  return std::make_unique<PrivateHostRows>(group, tp_group, model, fill_seed, rows_held, lookup_held);
}

}  // namespace engram
