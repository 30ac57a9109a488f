#include "core/placements/host_shared.h"
#include "core/placements/host_slice_step.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "core/base/progress.h"
#include "core/base/size_text.h"
#include "core/base/text_list.h"
#include "core/base/units.h"
#include "core/deployment/deployment.h"
#include "core/exchange/group_agreement.h"
#include "core/lookup/lookup_tp_slice.h"
#include "core/lookup/tp_heads.h"
#include "core/base/elapsed.h"
#include "core/model/table_fill.h"
#include "core/placements/host_rows_on_device.h"
#include "core/placements/private_host_rows.h"

namespace engram {
namespace {

// The node's /dev/shm copy of every table, one file per TP slice
// (core/lookup/tp_heads.h), as this rank maps its slice (the writer creates
// and fills every slice read-write, the others map theirs read-only).
class HostSharedTables final : public PlacementTables {
 public:
  explicit HostSharedTables(PlacementContext& context)
      : context_(context), shm_(*context.backend.shm), host_(context.host_group),
        tp_size_(context.tp_group.size()), tp_rank_(context.tp_group.rank()) {
    // Every rank names every slice file alike: survivors of a dead writer remove them.
    for (const TableSpec& spec : context_.model.tables)
      for (int t = 0; t < tp_size_; ++t)
        if (slice_rows(spec, t).row_count > 0) files_.push_back({&spec, t, segment_name(spec, t)});
  }

  // Local clean-up: unmap; the writer also removes the files (a peer may be
  // gone, so nobody waits for the others).
  ~HostSharedTables() override {
    device_.release().ignore();  // unregistered before the segments unmap
    created_.clear();
    segments_.clear();
    if (!context_.is_host_writer()) return;
    for (const SliceFile& file : files_)
      if (file.created) shm_.unlink(file.name).ignore();
  }

  Status lookup(int table_index, const LookupRequest& request) override {
    const std::unique_ptr<ShmMapping>& segment = segments_[static_cast<size_t>(table_index)];
    // An empty slice (tp above the head count) has no file: nothing to read.
    return lookup_host_shared(context_.tp_group, request,
                              segment ? segment->data() : std::span<const std::byte>());
  }

  bool device_lookup_ready() const override { return device_.built(); }

  Status lookup_device(int table_index, const DeviceLookupRequest& request) override {
    if (!device_.built()) {
      return Status(ErrorCode::kFailedPrecondition,
                    device_.unavailable().empty() ? "device lookup on a rank without a device (no DeviceCompute)"
                                                  : device_.unavailable(),
                    {context_.group.world_rank(), -1, "lookup"});
    }
    return device_.lookup_device(table_index, request);
  }

  // Readers and the writer unregister and unmap. The names went at build
  // once every rank had mapped; one the writer could not remove then goes
  // after the host's barrier (and survivors try where that barrier failed).
  Status release() override {
    Status first = device_.release();
    created_.clear();
    segments_.clear();
    for (SliceFile& file : files_)
      if (file.created || !context_.is_host_writer()) unlink_after_barrier_.push_back(file.name);
    for (SliceFile& file : files_) file.created = false;
    return first;
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
    created_.resize(files_.size());
    int gone = -1;
    // The fill's time includes creating the segments: the writer reserves
    // their pages (posix_fallocate, so a full tmpfs is an error here, not a
    // SIGBUS mid-fill), which allocates and zeroes them, and is about half
    // of it at a V4.1 layer's size (docs/perf_notes.md).
    const auto fill_start = std::chrono::steady_clock::now();
    Status agreed = agree_on_status(host_, create_segments(), "shm table create", &gone);
    if (agreed.is_ok()) agreed = fill_segments(gone);
    // The writer reserved and filled; the others only walked the chunks' agreements.
    if (context_.is_host_writer()) footprint_.host_fill_seconds = seconds_since(fill_start);
    if (agreed.is_ok()) agreed = agree_on_status(host_, open_segments(), "shm table open", &gone);
    if (!agreed.is_ok()) return undo_failed_build(std::move(agreed), gone);
    // Every rank of the node has mapped its slice: the names can go (as vLLM
    // unlinks its file), so a job killed from here on, SIGKILL included,
    // leaves nothing in /dev/shm; tmpfs frees the pages with the last map.
    // Then the writer lets go of the slices no rank of this node maps.
    unlink_mapped_files();
    created_.clear();
    const auto register_start = std::chrono::steady_clock::now();
    Status registered = register_with_device();
    footprint_.device_register_seconds = seconds_since(register_start);
    return registered;
  }

 private:
  // One file of a table's TP slice: engramlab-<job>-<part>-layer<id>[-tp<t>].
  struct SliceFile {
    const TableSpec* spec = nullptr;
    int tp_rank = 0;
    std::string name;
    bool created = false;  // by this rank (the writer), in this build
  };

  RowRange slice_rows(const TableSpec& spec, int tp_rank) const {
    return rows_of_heads(spec, tp_head_slice(spec.head_count(), tp_size_, tp_rank));
  }
  std::string segment_name(const TableSpec& spec, int tp_rank) const {
    return host_table_slice_segment_name(context_.job_id, context_.shm_name_part, spec.layer_id, tp_size_, tp_rank);
  }

  // The writer removes the names of the files it created. A name it cannot
  // remove stays with `created` set, so release and the destructor try again.
  void unlink_mapped_files() {
    if (!context_.is_host_writer()) return;
    for (SliceFile& file : files_) {
      if (!file.created) continue;
      const Status unlinked = shm_.unlink(file.name);
      if (unlinked.is_ok() || unlinked.code() == ErrorCode::kNotFound) file.created = false;
    }
  }

  Status create_segments() {
    if (!context_.is_host_writer()) return Status::ok();
    for (size_t k = 0; k < files_.size(); ++k) {
      SliceFile& file = files_[k];
      const uint64_t bytes = static_cast<uint64_t>(slice_rows(*file.spec, file.tp_rank).row_count) *
                             file.spec->row_bytes();
      auto segment = shm_.create(file.name, bytes);
      if (!segment.is_ok()) return std::move(segment).take_status().with_context(host_.world_rank(), -1, "shm_create");
      created_[k] = std::move(segment).value();
      file.created = true;
      footprint_.shared_host_bytes += bytes;
    }
    return Status::ok();
  }

  // Every rank walks the same chunks (the slices follow from the model and
  // tp), so the agreements line up.
  Status fill_segments(int& gone) {
    Status agreed;
    for (size_t k = 0; k < files_.size() && agreed.is_ok(); ++k) {
      const TableSpec& spec = *files_[k].spec;
      const RowRange rows = slice_rows(spec, files_[k].tp_rank);
      const uint64_t row_bytes = spec.row_bytes();
      const int64_t rows_per_chunk =
          std::max<int64_t>(1, static_cast<int64_t>(context_.host_fill_chunk_bytes / row_bytes));
      // A full table takes minutes to fill: the writer shows how far it got.
      std::optional<Progress> progress;
      if (context_.is_host_writer()) {
        progress.emplace(fmt::format("rank {}: filling the /dev/shm table of layer {}{}", host_.world_rank(),
                                     spec.layer_id,
                                     tp_size_ > 1 ? fmt::format(", TP slice {} of {}", files_[k].tp_rank, tp_size_)
                                                  : std::string()),
                         "rows", static_cast<uint64_t>(rows.row_count));
      }
      for (int64_t first = 0; first < rows.row_count && agreed.is_ok(); first += rows_per_chunk) {
        if (context_.is_host_writer()) {
          const int64_t count = std::min(rows_per_chunk, rows.row_count - first);
          const uint64_t chunk_bytes = static_cast<uint64_t>(count) * row_bytes;
          fill_table_rows_parallel(spec, context_.fill_seed, rows.first_row + first,
                                   created_[k]->bytes().subspan(static_cast<size_t>(first) * row_bytes, chunk_bytes),
                                   fill_threads_for(chunk_bytes));
          progress->update(static_cast<uint64_t>(first + count));
        }
        agreed = agree_on_status(host_, Status::ok(), "shm table fill", &gone);
      }
    }
    return agreed;
  }

  // The writer keeps its own slice's writable maps and, once every reader has
  // mapped, lets go of the other slices' (the files stay in tmpfs); every
  // other rank maps its slice read-only.
  // The rank's device reads its slice of the node's copy through its own
  // registration (read-only where the driver allows): the whole table at
  // tp 1, else the TP group's collective over its slices' rows.
  Status register_with_device() {
    if (context_.backend.compute == nullptr) return Status::ok();
    std::vector<std::span<const std::byte>> spans;
    std::vector<RowRange> ranges;
    for (size_t i = 0; i < segments_.size(); ++i) {
      const TableSpec& spec = context_.model.tables[i];
      const RowRange rows = slice_rows(spec, tp_rank_);
      spans.push_back(segments_[i] ? segments_[i]->data().first(static_cast<size_t>(rows.row_count) * spec.row_bytes())
                                   : std::span<const std::byte>());
      ranges.push_back(segments_[i] ? rows : RowRange{rows.first_row, 0});
    }
    return device_.build(*context_.backend.compute, context_.tp_group, context_.model, std::move(spans),
                         std::move(ranges),
                         tp_size_ > 1 ? HostRowsOnDevice::Lookup::kCollectiveOverRows
                                      : HostRowsOnDevice::Lookup::kWholeTable,
                         context_.tokens_per_rank_max, context_.ranks_share_gpus);
  }

  Status open_segments() {
    if (context_.is_host_writer()) {
      for (size_t k = 0; k < files_.size(); ++k)
        if (files_[k].tp_rank == tp_rank_)
          segments_[static_cast<size_t>(files_[k].spec - context_.model.tables.data())] = std::move(created_[k]);
      return Status::ok();
    }
    for (size_t i = 0; i < segments_.size(); ++i) {
      const TableSpec& spec = context_.model.tables[i];
      const RowRange rows = slice_rows(spec, tp_rank_);
      if (rows.row_count == 0) continue;
      auto segment = shm_.open_read_only(segment_name(spec, tp_rank_),
                                         static_cast<uint64_t>(rows.row_count) * spec.row_bytes());
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
    for (std::unique_ptr<ShmMapping>& segment : segments_) segment.reset();
    created_.clear();
    for (SliceFile& file : files_) {
      const std::string& name = file.name;
      const bool created_here = context_.is_host_writer() && file.created;
      file.created = false;
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
  int tp_size_ = 1;
  int tp_rank_ = 0;
  std::vector<SliceFile> files_;                        // every table's every non-empty slice
  std::vector<std::unique_ptr<ShmMapping>> created_;    // the writer's writable maps, by file, while it fills
  std::vector<std::unique_ptr<ShmMapping>> segments_;   // per table: this rank's slice, read-only
  std::vector<std::string> unlink_after_barrier_;
  HostRowsOnDevice device_;  // declared last: unregistered before the segments unmap
};

}  // namespace

const char* fallback_cause_name(FallbackCause cause) {
  switch (cause) {
    case FallbackCause::kGroupSizeOne: return "group_size_1";
    case FallbackCause::kShmMissing: return "shm_missing";
    case FallbackCause::kShmTooSmall: return "shm_too_small";
  }
  return "?";
}

std::vector<FallbackCause> host_shared_unmet(const HostShmFacts& host, uint64_t table_bytes_total) {
  std::vector<FallbackCause> causes;
  if (host.min_node_local_group_size <= 1) causes.push_back(FallbackCause::kGroupSizeOne);
  if (!host.shm_mounted) causes.push_back(FallbackCause::kShmMissing);
  else if (host.tmpfs_bytes_total < table_bytes_total) causes.push_back(FallbackCause::kShmTooSmall);
  return causes;
}

std::vector<HostShmUnmet> host_shared_fitness(std::span<const HostShmFacts> hosts, uint64_t table_bytes_total) {
  std::vector<HostShmUnmet> unfit;
  for (const HostShmFacts& host : hosts) {
    std::vector<FallbackCause> causes = host_shared_unmet(host, table_bytes_total);
    if (!causes.empty()) unfit.push_back({host, std::move(causes)});
  }
  // By name, whatever order the hosts came in (a deployment's or the ranks'), so every message words them alike.
  std::stable_sort(unfit.begin(), unfit.end(), [](const HostShmUnmet& a, const HostShmUnmet& b) {
    return natural_less(a.host.host_name, b.host.host_name);
  });
  return unfit;
}

std::string unmet_text(FallbackCause cause, const HostShmFacts& host, uint64_t table_bytes_total) {
  switch (cause) {
    case FallbackCause::kGroupSizeOne: return "node-local group size 1";
    case FallbackCause::kShmMissing: return "/dev/shm missing";
    case FallbackCause::kShmTooSmall:
      return fmt::format("/dev/shm tmpfs total {} < tables {}", format_size_short(host.tmpfs_bytes_total),
                         format_size_short(table_bytes_total));
  }
  return "?";
}

namespace host_shared_ops {

PlacementCost cost(const ModelSpec& model, const PlacementCostInput& in) {
  return {.host_shared_mapped_bytes = tp_slice_host_bytes(model, in.tp_size, in.tp_rank),
          .table_copy = TableCopyScope::kHost,
          .host_shm_bytes = model.table_bytes_total(),
          .host_pinned_bytes = host_lookup_pinned_bytes(model, in.tokens_per_rank_max, in.tp_size > 1, in.tp_size)};
}

Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context) {
  auto tables = std::make_unique<HostSharedTables>(context);
  ENGRAM_RETURN_IF_ERROR(tables->build());
  return std::unique_ptr<PlacementTables>(std::move(tables));
}

void ask_plan_for(EngramConfig& config) { config.cpu_offload = true; }

std::string doctor_verdict(const DoctorFacts& facts) {
  // The same check the plan and the runtime make, on this host's facts.
  const HostShmFacts here{facts.hostname, facts.shm_mounted, facts.shm_total_bytes, facts.node_local_group_size,
                          facts.environment};
  const std::vector<FallbackCause> causes = host_shared_unmet(here, facts.tables_bytes);
  if (!causes.empty()) {
    std::string why;
    bool shm_cause = false;
    for (FallbackCause c : causes) {
      why += (why.empty() ? "" : ", ") + unmet_text(c, here, facts.tables_bytes);
      shm_cause |= c != FallbackCause::kGroupSizeOne;
    }
    return fmt::format("falls back to host_head_sharded here: {}{}; {}", why,
                       causes.front() == FallbackCause::kGroupSizeOne
                           ? fmt::format(" (at tp {} this host's GPUs hold {} DP replica)", facts.tp,
                                         facts.node_local_group_size)
                           : std::string(),
                       shm_cause ? facts.shm_fix : facts.colocation_fix);
  }
  return fmt::format(
      "one copy per node fits: /dev/shm total {} >= tables {}; each rank maps its TP slice ({} at tp {}){}",
      format_gib(facts.shm_total_bytes), format_gib(facts.tables_bytes), format_gib(facts.tp_slice_bytes_max), facts.tp,
      facts.shm_free_bytes < facts.tables_bytes
          ? fmt::format(" (but only {} free now)", format_gib(facts.shm_free_bytes))
          : std::string());
}

}  // namespace host_shared_ops

std::string host_table_segment_name(const std::string& job_id, std::string_view name_part, int layer_id) {
  return fmt::format("{}layer{}", shm_segment_prefix(job_id, name_part), layer_id);
}

std::string host_table_slice_segment_name(const std::string& job_id, std::string_view name_part, int layer_id,
                                          int tp_size, int tp_rank) {
  ENGRAM_CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size);
  if (tp_size == 1) return host_table_segment_name(job_id, name_part, layer_id);
  return fmt::format("{}-tp{}", host_table_segment_name(job_id, name_part, layer_id), tp_rank);
}

Status lookup_host_shared(Collectives& tp_group, const LookupRequest& request,
                          std::span<const std::byte> node_slice_bytes) {
  return lookup_tp_slice(tp_group, request, node_slice_bytes, "host_shared: the shared table");
}

// Each rank reads its TP slice of its own tokens' heads from the node's
// copy, then the TP ranks assemble the heads.
StepTime host_shared_ops::step_time(const StepCostInput& in, const StepConstants& c) {
  return host_slice_step(in, c);
}

Status host_shared_ops::lookup_from_whole_table(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                                   std::span<const std::byte> whole_table_bytes) {
  return lookup_host_shared(tp_group, request, whole_table_bytes);
}

}  // namespace engram
