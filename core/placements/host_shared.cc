#include "core/placements/host_shared.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "core/base/progress.h"
#include "core/exchange/group_agreement.h"
#include "core/lookup/lookup_whole_table.h"
#include "core/model/table_fill.h"

namespace engram {
namespace {

// The node's /dev/shm copy of every table, as this rank maps it (the writer
// read-write, the others read-only).
class HostSharedTables final : public PlacementTables {
 public:
  explicit HostSharedTables(PlacementContext& context)
      : context_(context), shm_(*context.backend.shm), host_(context.host_group) {}

  // Local clean-up: unmap; the writer also removes the files (a peer may be
  // gone, so nobody waits for the others).
  ~HostSharedTables() override {
    for (std::unique_ptr<ShmMapping>& segment : segments_) {
      if (!segment) continue;
      const std::string name = segment->name();
      segment.reset();
      if (context_.is_host_writer()) shm_.unlink(name).ignore();
    }
  }

  Status lookup(int table_index, const LookupRequest& request) override {
    return lookup_host_shared(context_.group, request, segments_[static_cast<size_t>(table_index)]->data());
  }

  // Readers and the writer unmap; the files go after the host's barrier.
  Status release() override {
    for (std::unique_ptr<ShmMapping>& segment : segments_) {
      if (!segment) continue;
      unlink_after_barrier_.push_back(segment->name());
      segment.reset();
    }
    return Status::ok();
  }

  // After the barrier every rank has unmapped. The writer unlinks; if the
  // barrier failed (a member is gone, perhaps the writer) every survivor
  // tries, since tmpfs would otherwise keep the files. Only one finds them.
  Status after_host_released(bool host_barrier_ok) override {
    Status first;
    if (!context_.is_host_writer() && host_barrier_ok) return first;
    for (const std::string& name : unlink_after_barrier_) {
      Status unlinked = shm_.unlink(name);
      if (first.is_ok() && unlinked.code() != ErrorCode::kNotFound) first = std::move(unlinked);
    }
    unlink_after_barrier_.clear();
    return first;
  }

  // Every rank of the host takes part: the writer creates, then fills in
  // chunks with an agreement after each, so no reader waits on one
  // collective for the whole fill (188.8 GiB at host fill speed takes
  // minutes; a collective's deadline is shorter); the others then map
  // read-only. On failure nothing outlives the start.
  Status build() {
    segments_.resize(context_.model.tables.size());
    int gone = -1;
    Status agreed = agree_on_status(host_, create_segments(), "shm table create", &gone);
    if (agreed.is_ok()) agreed = fill_segments(gone);
    if (agreed.is_ok()) agreed = agree_on_status(host_, open_segments(), "shm table open", &gone);
    if (!agreed.is_ok()) return undo_failed_build(std::move(agreed), gone);
    return agreed;
  }

 private:
  std::string segment_name(const TableSpec& spec) const {
    return host_table_segment_name(context_.job_id, spec.layer_id);
  }

  Status create_segments() {
    if (!context_.is_host_writer()) return Status::ok();
    for (size_t i = 0; i < segments_.size(); ++i) {
      const TableSpec& spec = context_.model.tables[i];
      auto segment = shm_.create(segment_name(spec), spec.table_bytes());
      if (!segment.is_ok()) return std::move(segment).take_status().with_context(host_.world_rank(), -1, "shm_create");
      segments_[i] = std::move(segment).value();
      footprint_.shared_host_bytes += spec.table_bytes();
    }
    return Status::ok();
  }

  Status fill_segments(int& gone) {
    Status agreed;
    for (size_t i = 0; i < segments_.size() && agreed.is_ok(); ++i) {
      const TableSpec& spec = context_.model.tables[i];
      const uint64_t row_bytes = spec.row_bytes();
      const int64_t rows_per_chunk =
          std::max<int64_t>(1, static_cast<int64_t>(context_.host_fill_chunk_bytes / row_bytes));
      // A full table takes minutes to fill: the writer shows how far it got.
      std::optional<Progress> progress;
      if (context_.is_host_writer()) {
        progress.emplace(fmt::format("rank {}: filling the /dev/shm table of layer {}", host_.world_rank(),
                                     spec.layer_id),
                         "rows", static_cast<uint64_t>(spec.row_count()));
      }
      for (int64_t first = 0; first < spec.row_count() && agreed.is_ok(); first += rows_per_chunk) {
        if (context_.is_host_writer()) {
          const int64_t rows = std::min(rows_per_chunk, spec.row_count() - first);
          fill_table_rows(spec, context_.fill_seed, first,
                          segments_[i]->bytes().subspan(static_cast<size_t>(first) * row_bytes,
                                                        static_cast<size_t>(rows) * row_bytes));
          progress->update(static_cast<uint64_t>(first + rows));
        }
        agreed = agree_on_status(host_, Status::ok(), "shm table fill", &gone);
      }
    }
    return agreed;
  }

  Status open_segments() {
    if (context_.is_host_writer()) return Status::ok();
    for (size_t i = 0; i < segments_.size(); ++i) {
      const TableSpec& spec = context_.model.tables[i];
      auto segment = shm_.open_read_only(segment_name(spec), spec.table_bytes());
      if (!segment.is_ok()) return std::move(segment).take_status().with_context(host_.world_rank(), -1, "shm_open");
      segments_[i] = std::move(segment).value();
    }
    return Status::ok();
  }

  // Unmap, and the writer unlinks what it created (never a name it found
  // taken: that segment is someone else's, e.g. a live run's or a stale one
  // the operator must look at). A dead or silent writer cannot unlink, and tmpfs keeps
  // its files, so the survivors do (names are job-unique: whatever exists
  // under them is this job's).
  Status undo_failed_build(Status agreed, int gone) {
    const bool writer_gone = gone == context_.host_writer_world_rank || gone == kUnknownMemberGone;
    for (size_t i = 0; i < segments_.size(); ++i) {
      const std::string name = segment_name(context_.model.tables[i]);
      const bool created_here = context_.is_host_writer() && segments_[i] != nullptr;
      segments_[i].reset();
      if (!created_here && (context_.is_host_writer() || !writer_gone)) continue;
      Status unlinked = shm_.unlink(name);
      if (!unlinked.is_ok() && unlinked.code() != ErrorCode::kNotFound) {
        // Say so: a table-sized file may be left in /dev/shm.
        agreed = Status(agreed.code(), agreed.message() + "; also could not remove " + name + ": " +
                                           unlinked.to_string() + " (engramlab shm clean removes it)",
                        agreed.context());
      }
    }
    footprint_.shared_host_bytes = 0;
    return agreed;
  }

  PlacementContext context_;  // a copy: the groups, backend and model it names outlive these tables
  HostSharedMemory& shm_;
  Collectives& host_;
  std::vector<std::unique_ptr<ShmMapping>> segments_;  // per table
  std::vector<std::string> unlink_after_barrier_;
};

PlacementCost cost(const ModelSpec& model, const PlacementCostInput&) {
  return {.host_shared_mapped_bytes = model.table_bytes_total(),
          .table_copy = TableCopyScope::kHost,
          .host_shm_bytes = model.table_bytes_total()};
}

Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context) {
  auto tables = std::make_unique<HostSharedTables>(context);
  ENGRAM_RETURN_IF_ERROR(tables->build());
  return std::unique_ptr<PlacementTables>(std::move(tables));
}

}  // namespace

const PlacementOps& host_shared_ops() {
  static const PlacementOps ops{
      .id = Placement::kHostShared, .name = "host_shared", .group = PlacementGroup::kNodeLocalGroup, .cost = cost,
      .host_memory_fix = "host_shared already keeps one copy per node: give hosts with more RAM", .build = build};
  return ops;
}

std::string host_table_segment_name(const std::string& job_id, int layer_id) {
  return fmt::format("{}layer{}", shm_segment_prefix(job_id), layer_id);
}

Status lookup_host_shared(Collectives& group, const LookupRequest& request,
                          std::span<const std::byte> node_table_bytes) {
  return lookup_whole_table(group, request, node_table_bytes, "host_shared: the shared table");
}

}  // namespace engram
