#include "core/placements/device_head_sharded.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/backend/device_resources.h"
#include "core/base/units.h"
#include "core/deployment/deployment.h"
#include "core/exchange/group_agreement.h"
#include "core/lookup/shard_layout.h"
#include "core/lookup/tp_heads.h"
#include "core/placements/host_lookup_staging.h"

namespace engram {
namespace {

// The slice width every member pads its chunk to: ceil(heads / group).
int slice_width(int heads, int group_size) { return (heads + group_size - 1) / group_size; }

int heads_of(const ModelSpec& model) {
  ENGRAM_CHECK(!model.tables.empty());
  return model.tables[0].head_count();  // every Engram table of a model has one shape (make_collective_workspace checks)
}

int dim_max_of(const ModelSpec& model) {
  int dim = 0;
  for (const TableSpec& t : model.tables) dim = std::max(dim, t.dim);
  return dim;
}

// One chunk of the exchange, in bf16 values: slot tokens x slice width x dim.
uint64_t chunk_values(int64_t slot, int width, int dim) {
  return static_cast<uint64_t>(slot) * static_cast<uint64_t>(width) * static_cast<uint64_t>(dim);
}

// The received chunks read as bf16 rows: chunk m (slot x width rows) holds
// member m's slice of w_m heads for each token, dense ([slot][w_m][dim]: a
// short last slice leaves the chunk's end unused), so output (token t,
// head h) is row m x slot x width + t x w_m + h - m x width, m = h / width.
std::vector<int64_t> reassembly_rows(int64_t slot, int heads, int width) {
  std::vector<int64_t> rows(static_cast<size_t>(slot) * static_cast<size_t>(heads));
  for (int64_t t = 0; t < slot; ++t)
    for (int h = 0; h < heads; ++h) {
      const int m = h / width;
      const int member_width = std::min(width, heads - m * width);
      rows[static_cast<size_t>(t) * static_cast<size_t>(heads) + static_cast<size_t>(h)] =
          m * slot * width + t * member_width + (h - m * width);
    }
  return rows;
}

class DeviceHeadShardedTables final : public PlacementTables {
 public:
  DeviceHeadShardedTables(RankBackend& backend, Collectives& group, const ModelSpec& model, int tp_rank, int tp)
      : backend_(backend), compute_(*backend.compute), group_(group), model_(model), tp_rank_(tp_rank), tp_(tp) {
    ENGRAM_CHECK(tp >= 1 && tp_rank >= 0 && tp_rank < tp);
  }

  ~DeviceHeadShardedTables() override {
    // Local clean-up: users of the buffers first; each MappedAllocation gives back its slice itself.
    compute_.synchronize({}).ignore();
    free_device_buffers().ignore();
  }

  bool device_lookup_ready() const override { return true; }  // built only with a device

  Status lookup_device(int table_index, const DeviceLookupRequest& r) override {
    return exchange_on_device(table_index, r, nullptr);
  }

  // The device lookup with a copy on each side; then every member's
  // header; then the ids of another slice's bucket (see the header).
  Status lookup(int table_index, const LookupRequest& request) override {
    const int me = group_.world_rank();
    bool took_part = false;
    bool headers_agree = false;
    const Status looked = staging_.run(compute_, request, me, [&](const DeviceLookupRequest& d) -> Status {
      const Status exchanged = exchange_on_device(table_index, d, &took_part);
      if (!took_part) return exchanged;  // the headers gathered are not this step's
      ENGRAM_RETURN_IF_ERROR(compute_.synchronize(d.stream).with_context(me, -1, "lookup"));
      const Status headers = check_device_group_headers(compute_, workspace_, posted(d), me);
      headers_agree = headers.is_ok();
      return exchanged.is_ok() ? headers : exchanged;
    });
    if (!took_part) return looked;
    return serve_other_buckets(table_index, request, looked, headers_agree);
  }

  Status release() override {
    Status first = compute_.synchronize({});
    Status freed = free_device_buffers();
    if (first.is_ok()) first = std::move(freed);
    for (Table& t : tables_) {
      Status released = t.slice.release();
      if (first.is_ok()) first = std::move(released);
    }
    return first;
  }

  // Every table's slice and the lookup's buffers, then one agreement (on
  // any rank's failure every rank gives back what it built), then the
  // communicator, itself a collective of the whole group.
  Status build(const PlacementContext& context) {
    const int me = group_.world_rank();
    Status status;
    for (const TableSpec& spec : context.model.tables) {
      status = build_slice(spec, context.fill_seed);
      if (!status.is_ok()) break;
    }
    if (status.is_ok()) status = build_buffers(context.tokens_per_rank_max);
    Status agreed = agree_on_status(group_, status, "device head slice build");
    if (agreed.is_ok()) {
      auto comm = compute_.connect(group_);
      if (comm.is_ok()) comm_ = std::move(comm).value();
      else agreed = std::move(comm).take_status().with_context(me, -1, "connect");
    }
    if (!agreed.is_ok()) {
      release().ignore();
      footprint_.device_bytes = 0;
    }
    return agreed;
  }

 private:
  struct Table {
    HeadRange heads;                 // this rank's slice
    RowRange rows;                   // its heads' rows, contiguous
    MappedAllocation slice;
    std::vector<int64_t> head_rows;  // each head's first row, then the row count: which slice holds a row
  };

  OwnedRows owned_rows(const Table& t) const { return {t.rows.first_row, t.rows.row_count, t.slice.address(), nullptr}; }

  Status build_slice(const TableSpec& spec, uint64_t fill_seed) {
    const int me = group_.world_rank();
    DeviceMemory& device = *backend_.device;
    Table& t = tables_.emplace_back();
    t.heads = head_shard(spec.head_count(), group_.size(), group_.rank());
    t.rows = rows_of_heads(spec, t.heads);
    for (int h = 0; h <= spec.head_count(); ++h) t.head_rows.push_back(spec.head_offset(h));
    auto info = device.info();
    if (!info.is_ok()) return std::move(info).take_status().with_context(me, -1, "device info");
    const uint64_t bytes =
        round_up(std::max<uint64_t>(static_cast<uint64_t>(t.rows.row_count) * spec.row_bytes(), 1), info->granularity_bytes);
    // Never exported (NCCL and the gather read it in place).
    auto slice = MappedAllocation::create(device, bytes, HandleType::kNone);
    if (!slice.is_ok()) return std::move(slice).take_status().with_context(me, -1, "create");
    t.slice = std::move(slice).value();
    ENGRAM_RETURN_IF_ERROR(compute_.fill_table_rows(t.slice.address(), spec, fill_seed, t.rows.first_row,
                                                    t.rows.row_count, {})
                               .with_context(me, -1, "fill"));
    ENGRAM_RETURN_IF_ERROR(compute_.synchronize({}).with_context(me, -1, "fill"));
    footprint_.device_bytes += bytes;
    return Status::ok();
  }

  Status build_buffers(int64_t tokens_per_rank_max) {
    const int me = group_.world_rank();
    auto workspace = make_collective_workspace(compute_, tokens_per_rank_max, model_, group_.size(), me, false);
    if (!workspace.is_ok()) return std::move(workspace).take_status().with_context(me, -1, "lookup buffers");
    workspace_ = *workspace;
    width_ = slice_width(workspace_.heads, group_.size());
    const uint64_t chunk_bytes = chunk_values(tokens_per_rank_max, width_, workspace_.dim_max) * 2;
    const uint64_t members = static_cast<uint64_t>(group_.size());
    const std::vector<int64_t> rows = reassembly_rows(tokens_per_rank_max, workspace_.heads, width_);
    // Under sequence parallelism the chunks hold a token shard's slot.
    const std::vector<int64_t> shard_rows =
        tp_ > 1 ? reassembly_rows(shard_slot(tokens_per_rank_max), workspace_.heads, width_) : std::vector<int64_t>{};
    for (auto [buffer, bytes] : {std::pair{&send_, chunk_bytes * members}, std::pair{&received_, chunk_bytes * members},
                                 std::pair{&reassembly_, rows.size() * sizeof(int64_t)},
                                 std::pair{&shard_reassembly_, shard_rows.size() * sizeof(int64_t)}}) {
      if (bytes == 0) continue;
      auto allocated = compute_.allocate(bytes);
      if (!allocated.is_ok()) return std::move(allocated).take_status().with_context(me, -1, "lookup buffers");
      *buffer = *allocated;
    }
    // A member with no heads (group above the head count) sends a chunk
    // nobody reads; zeroed so the exchange moves defined bytes.
    ENGRAM_RETURN_IF_ERROR(compute_.fill_async(send_, 0, chunk_bytes * members, {}).with_context(me, -1, "lookup buffers"));
    ENGRAM_RETURN_IF_ERROR(
        compute_.copy_to_device(reassembly_, std::as_bytes(std::span(rows))).with_context(me, -1, "lookup buffers"));
    if (!shard_rows.empty())
      ENGRAM_RETURN_IF_ERROR(compute_.copy_to_device(shard_reassembly_, std::as_bytes(std::span(shard_rows)))
                                 .with_context(me, -1, "lookup buffers"));
    auto staging = HostLookupStaging::make(compute_, model_, tokens_per_rank_max);
    if (!staging.is_ok()) return std::move(staging).take_status().with_context(me, -1, "lookup buffers");
    staging_ = std::move(staging).value();
    return compute_.synchronize({}).with_context(me, -1, "lookup buffers");
  }

  Status free_device_buffers() {
    Status first = free_collective_workspace(compute_, workspace_);
    for (CollectiveWorkspace* w : {&other_buckets_}) {
      Status freed = free_collective_workspace(compute_, *w);
      if (first.is_ok()) first = std::move(freed);
    }
    for (DevicePtr* p : {&send_, &received_, &reassembly_, &shard_reassembly_}) {
      if (*p == 0) continue;
      Status freed = compute_.free(*p);
      if (first.is_ok()) first = std::move(freed);
      *p = 0;
    }
    Status freed = staging_.release(compute_);
    if (first.is_ok()) first = std::move(freed);
    comm_.reset();
    return first;
  }

  // ceil(slot / tp): the slot of a TP rank's token shard.
  int64_t shard_slot(int64_t slot) const { return (slot + tp_ - 1) / tp_; }

  // What this rank posts to the group's exchange. Under sequence
  // parallelism (sequence_parallel_shards == tp) only its own token shard
  // of the replica's tokens, [tp_rank x c, tp_rank x c + c) with c =
  // ceil(tokens / tp) (the tokens the replica has left there), in a slot of
  // ceil(slot / tp): every member then gathers its heads for the shards the
  // others posted, and the all-to-all brings each rank its own shard's
  // heads alone. Otherwise the request itself.
  DeviceLookupRequest posted(const DeviceLookupRequest& r) const {
    if (r.sequence_parallel_shards == 1) return r;
    ENGRAM_CHECK(r.sequence_parallel_shards == tp_);
    DeviceLookupRequest p = r;
    const int64_t c = shard_slot(r.tokens);
    const int64_t first = std::min(r.tokens, tp_rank_ * c);
    p.tokens = std::min(c, r.tokens - first);
    if (p.tokens > 0) p.row_ids = r.row_ids + static_cast<uint64_t>(first * r.table->head_count()) * 8;
    p.tokens_per_rank_max = shard_slot(r.tokens_per_rank_max);
    p.sequence_parallel_shards = 1;
    return p;
  }

  // All-gather ids, gather this rank's heads for every member's tokens,
  // all_to_all, reassemble: every step on the request's stream.
  Status exchange_on_device(int table_index, const DeviceLookupRequest& r, bool* took_part) {
    const int me = group_.world_rank();
    ENGRAM_RETURN_IF_ERROR(check_token_shard_request(r, me, tp_));
    ENGRAM_RETURN_IF_ERROR(check_workspace_fits(workspace_, *comm_, r, me));
    const TableSpec& table = *r.table;
    const Table& t = tables_[static_cast<size_t>(r.table_unknown ? 0 : table_index)];
    // The slot rule is the replica's tokens against its slot, token shard or not.
    const Status slot = check_device_slot(r, me);
    const bool contribute = r.contribute && slot.is_ok();
    const bool token_shards = r.sequence_parallel_shards > 1;
    const DeviceLookupRequest p = posted(r);
    ENGRAM_RETURN_IF_ERROR(
        gather_group_ids(compute_, *comm_, workspace_, table_index, p, contribute, me, GroupHeaders::kCarried));
    const int heads = table.head_count();
    // The chunks' layout, whatever this step's slot: the workspace's slot, or its token shard's.
    const int64_t slot_max = token_shards ? shard_slot(workspace_.tokens_per_rank_max) : workspace_.tokens_per_rank_max;
    const uint64_t chunk = chunk_values(slot_max, width_, table.dim);
    const int64_t member_ids = (p.tokens_per_rank_max + workspace_.header_tokens) * heads;
    if (t.heads.size() > 0) {
      for (int m = 0; m < comm_->size(); ++m) {
        DeviceGather g;
        g.ids = workspace_.gathered_ids + static_cast<uint64_t>(m) * static_cast<uint64_t>(member_ids) * 8;
        g.tokens = p.tokens_per_rank_max;
        g.ids_per_token = heads;
        g.head_begin = t.heads.begin;
        g.head_count = t.heads.size();
        g.range_first_row = t.rows.first_row;
        g.range_row_count = t.rows.row_count;
        g.range_base = t.slice.address();
        g.zero_missing = true;
        g.layout = device_row_layout(table);
        g.out = send_ + static_cast<uint64_t>(m) * chunk * 2;
        ENGRAM_RETURN_IF_ERROR(compute_.gather(g, r.stream).with_context(me, -1, "gather own heads"));
      }
    }
    ENGRAM_RETURN_IF_ERROR(comm_->all_to_all(send_, received_, chunk * 2, r.stream).with_context(me, -1, "all-to-all"));
    if (took_part != nullptr) *took_part = true;
    if (!r.contribute) return Status::ok();
    if (!slot.is_ok()) return slot;
    if (r.tokens == 0) return Status::ok();
    // The received slices, read as bf16 rows, into [tokens][heads][dim]:
    // every token, or the c tokens of this rank's shard (past the replica's
    // last token the posted ids were DEAD, so those rows arrive zero).
    DeviceGather g;
    g.ids = token_shards ? shard_reassembly_ : reassembly_;
    g.tokens = token_shards ? shard_slot(r.tokens) : r.tokens;
    g.ids_per_token = heads;
    g.head_begin = 0;
    g.head_count = heads;
    g.range_first_row = 0;
    g.range_row_count = static_cast<int64_t>(comm_->size()) * slot_max * width_;
    g.range_base = received_;
    g.zero_missing = true;
    g.layout = device_row_layout(table);
    g.layout.format = RowFormat::kBf16;
    g.layout.row_bytes = static_cast<uint64_t>(table.dim) * 2;
    g.out = r.output;
    return compute_.gather(g, r.stream).with_context(me, -1, "reassemble heads");
  }

  // Which slice holds `row` of table t (-1: outside the table).
  int slice_of_row(const Table& t, int64_t row) const {
    if (row < 0 || row >= t.head_rows.back()) return -1;
    const auto it = std::upper_bound(t.head_rows.begin(), t.head_rows.end(), row);
    return static_cast<int>(it - t.head_rows.begin() - 1) / width_;
  }

  // Indexes into request.row_ids of in-table ids whose row another slice
  // holds than the one of their head position, within this rank's output
  // (its token shard under sequence parallelism: from `first_id` on).
  std::vector<size_t> other_bucket_ids(const Table& t, const LookupRequest& request, size_t first_id) const {
    std::vector<size_t> out;
    const size_t heads = static_cast<size_t>(request.heads());
    const size_t end = std::min(request.row_ids.size(), first_id + request.output.size() / request.table->dim);
    for (size_t i = first_id; i < end; ++i) {
      const int holder = slice_of_row(t, request.row_ids[i]);
      if (holder >= 0 && holder != static_cast<int>(i % heads) / width_) out.push_back(i);
    }
    return out;
  }

  // Every member that took part in the exchange comes here: one byte each
  // says whether its ids hold an id of another slice's bucket; only where
  // one does (and the group agreed on the table) the group runs the
  // collective over the rows each member holds for those ids alone, and
  // they overwrite the exchange's zero rows.
  Status serve_other_buckets(int table_index, const LookupRequest& request, const Status& looked, bool headers_agree) {
    const int me = group_.world_rank();
    const Table& t = tables_[static_cast<size_t>(request.table_unknown ? 0 : table_index)];
    // Under sequence parallelism this rank's output starts at its shard's first token.
    const size_t first_id = request.sequence_parallel_shards == 1 || !looked.is_ok()
                                ? 0
                                : static_cast<size_t>(tp_rank_) * static_cast<size_t>(request.output_token_count()) *
                                      static_cast<size_t>(request.heads());
    const std::vector<size_t> mine =
        looked.is_ok() && !request.table_unknown ? other_bucket_ids(t, request, first_id) : std::vector<size_t>{};
    const uint8_t flag = mine.empty() ? 0 : 1;
    std::vector<uint8_t> flags(static_cast<size_t>(group_.size()));
    ENGRAM_RETURN_IF_ERROR(
        group_.all_gather(std::as_bytes(std::span(&flag, 1)), std::as_writable_bytes(std::span(flags))));
    if (!headers_agree || std::none_of(flags.begin(), flags.end(), [](uint8_t f) { return f != 0; })) return looked;

    // Made on first need (host lookups only: the device lookup never runs this).
    Status made;
    if (other_buckets_.gathered_ids == 0) {
      auto w = make_collective_workspace(compute_, workspace_.tokens_per_rank_max, model_, group_.size(), me);
      if (w.is_ok()) other_buckets_ = *w;
      else made = std::move(w).take_status().with_context(me, -1, "lookup buffers");
    }
    ENGRAM_RETURN_IF_ERROR(agree_on_status(group_, made, "other-bucket lookup buffers"));

    // Only those ids; every other DEAD. The collective writes every token's rows.
    const size_t dim = static_cast<size_t>(request.table->dim);
    std::vector<int64_t> ids(request.row_ids.size(), kDeadId);
    for (size_t i : mine) ids[i] = request.row_ids[i];
    std::vector<uint16_t> rows(request.row_ids.size() * dim);
    LookupRequest only = request;
    only.sequence_parallel_shards = 1;
    if (looked.is_ok()) {
      only.row_ids = ids;
      only.output = rows;
    }
    const Status served = staging_.run(compute_, only, me, [&](const DeviceLookupRequest& d) {
      return lookup_collective_on_device(compute_, *comm_, other_buckets_, owned_rows(t), table_index, d, me,
                                         GroupHeaders::kNone);
    });
    if (!looked.is_ok()) return looked;
    ENGRAM_RETURN_IF_ERROR(served);
    for (size_t i : mine)
      std::copy_n(rows.begin() + static_cast<std::ptrdiff_t>(i * dim), dim,
                  request.output.begin() + static_cast<std::ptrdiff_t>((i - first_id) * dim));
    return Status::ok();
  }

  RankBackend& backend_;
  DeviceCompute& compute_;
  Collectives& group_;
  const ModelSpec& model_;
  std::vector<Table> tables_;
  std::unique_ptr<DeviceCollectives> comm_;
  CollectiveWorkspace workspace_;      // ids and headers only
  CollectiveWorkspace other_buckets_;  // the summed collective, made on first need
  const int tp_rank_;                  // this rank's TP rank and the TP size: its token shard under sequence parallelism
  const int tp_;
  int width_ = 0;                      // ceil(heads / group)
  DevicePtr send_ = 0;                 // bf16 [member][slot][width][dim]: this rank's heads of each member's tokens
  DevicePtr received_ = 0;             // bf16 [member][slot][width][dim]: each member's heads of this rank's tokens
  DevicePtr reassembly_ = 0;           // int64 [slot][heads]: reassembly_rows
  DevicePtr shard_reassembly_ = 0;     // int64 [ceil(slot / tp)][heads]: the same for a token shard (tp > 1)
  HostLookupStaging staging_;
};

}  // namespace

namespace device_head_sharded_ops {

PlacementCost cost(const ModelSpec& model, const PlacementCostInput& in) {
  return {.hbm_table_bytes =
              device_head_shard_hbm_bytes(model, in.shard_group_size, in.shard_index, in.vmm_granularity_bytes),
          .hbm_buffer_bytes =
              device_head_sharded_buffer_bytes(model, in.shard_group_size, in.tokens_per_rank_max, in.tp_size)};
}

Status capable(const RankBackend& backend) { return needs_a_device(backend, Placement::kDeviceHeadSharded); }

Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context) {
  auto tables = std::make_unique<DeviceHeadShardedTables>(context.backend, context.group, context.model,
                                                          context.tp_group.rank(), context.tp_group.size());
  ENGRAM_RETURN_IF_ERROR(tables->build(context));
  return std::unique_ptr<PlacementTables>(std::move(tables));
}

// The rules never pick it; the config names it.
void ask_plan_for(EngramConfig& config) { config.placement = "device_head_sharded"; }

std::string report_heads(int heads, int, int group_size) {
  ENGRAM_CHECK(group_size >= 1);
  return fmt::format("; heads in {} slices of {} over the shard group (vLLM's [T, ceil(H/P), D])", group_size,
                     slice_width(heads, group_size));
}

std::string doctor_verdict(const DoctorFacts& facts) {
  if (!facts.have_gpus) return "unavailable: no GPU";
  return "NCCL all-gather of ids + all-to-all of head slices over the group; table/group HBM per GPU";
}

}  // namespace device_head_sharded_ops

uint64_t device_head_shard_hbm_bytes(const ModelSpec& spec, int group_size, int index, uint64_t granularity_bytes) {
  ENGRAM_CHECK(group_size >= 1 && index >= 0 && index < group_size);
  uint64_t total = 0;
  for (const TableSpec& t : spec.tables) {
    const RowRange rows = rows_of_heads(t, head_shard(t.head_count(), group_size, index));
    total += round_up(std::max<uint64_t>(static_cast<uint64_t>(rows.row_count) * t.row_bytes(), 1), granularity_bytes);
  }
  return total;
}

uint64_t device_head_sharded_buffer_bytes(const ModelSpec& spec, int group_size, int tokens_per_rank_max, int tp) {
  ENGRAM_CHECK(group_size >= 1 && tokens_per_rank_max >= 0 && tp >= 1);
  const uint64_t heads = static_cast<uint64_t>(heads_of(spec));
  const uint64_t members = static_cast<uint64_t>(group_size);
  const uint64_t header_tokens = (kGroupHeaderWords + heads - 1) / heads;
  const uint64_t slot_ids = (static_cast<uint64_t>(tokens_per_rank_max) + header_tokens) * heads;
  const uint64_t ids_bytes = (slot_ids + slot_ids * members + header_tokens * heads * (spec.tables.size() + 1)) * 8;
  const uint64_t chunks_bytes =
      2 * members * chunk_values(tokens_per_rank_max, slice_width(static_cast<int>(heads), group_size), dim_max_of(spec)) * 2;
  const uint64_t shard_slot = tp > 1 ? (static_cast<uint64_t>(tokens_per_rank_max) + tp - 1) / tp : 0;
  const uint64_t reassembly_bytes = (static_cast<uint64_t>(tokens_per_rank_max) + shard_slot) * heads * 8;
  return ids_bytes + chunks_bytes + reassembly_bytes;
}

// Ids all-gathered over the shard group, each rank's head slice looked up
// for every token of the group, the rows brought back (engramlab: an
// all-to-all; vLLM: an all-gather, each rank keeping its own tokens).
StepTime device_head_sharded_ops::step_time(const StepCostInput& in, const StepConstants& c) {
  StepBuilder b(in, c);
  const int g = in.group_size;
  const double tokens = in.rules.pads_to_slot ? std::max(in.tokens, in.tokens_slot) : in.tokens;
  const double slice = (in.heads + g - 1) / g;
  const double rows = g * tokens * slice;
  b.launch();
  b.collective("ids", CollectiveKind::kAllGather, g, in.group_link, step_ids_bytes(in, g));
  b.local_gather("head slice rows", rows, rows);
  const CollectiveKind back = in.rules.head_shards_back;
  const double bytes = (back == CollectiveKind::kAllGather ? g * rows : rows) * static_cast<double>(in.out_row_bytes);
  b.collective("rows back", back, g, in.group_link, bytes);
  return b.finish();
}

}  // namespace engram
