#include "core/runtime/engram_runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <mutex>

#include "core/plan/deployment_plan.h"
#include "core/exchange/gather_facts.h"
#include "core/exchange/group_agreement.h"
#include "core/lookup/lookup_device_collective.h"
#include "core/lookup/lookup_device_peer.h"
#include "core/lookup/lookup_host_head_sharded.h"
#include "core/lookup/lookup_host_private.h"
#include "core/lookup/lookup_host_shared.h"
#include "core/exchange/peer_shard_table.h"
#include "core/lookup/shard_layout.h"
#include "core/base/progress.h"
#include "core/model/table_fill.h"
#include "core/base/units.h"

namespace engram {
namespace {

// The runtime's own part of each rank's start facts (core/gather_facts
// carries hostname, boot id, NVLink domain and IMEX around it). Explicit
// padding: the bytes key the plan cache.
struct RuntimeWireFacts {
  uint64_t tmpfs_bytes_total = 0;
  uint64_t gpu_memory_bytes = 0;
  uint8_t shm_mounted = 0;
  uint8_t fabric_attribute = 0;
  uint8_t has_device = 0;
  uint8_t environment = 0;  // RuntimeEnvironment: picks the fixes warnings name
  uint8_t pad[4] = {};
};
static_assert(sizeof(RuntimeWireFacts) == 24);

// What every rank reads from the plan, derived once per plan: the plan, and
// per host its writer (lowest world rank) and whether it needs a /dev/shm
// copy, and per rank the reason of its placement group. Rank-sized lookups
// here keep a rank's start O(1) in the world size.
struct SharedPlan {
  Result<PlanResult> plan = internal_error("not planned");
  std::vector<int> host_writer_world_rank;
  std::vector<uint8_t> host_needs_segment;
  std::vector<int> group_of_rank;  // index into plan->groups; -1 if none
};

SharedPlan derive(Result<PlanResult> plan) {
  SharedPlan out;
  out.plan = std::move(plan);
  if (!out.plan.is_ok()) return out;
  const PlanResult& p = out.plan.value();
  out.host_writer_world_rank.assign(p.deployment.hosts.size(), -1);
  out.host_needs_segment.assign(p.deployment.hosts.size(), 0);
  for (const RankPlan& rp : p.ranks) {
    int& writer = out.host_writer_world_rank[static_cast<size_t>(rp.host)];
    if (writer < 0) writer = rp.rank;
    if (rp.placement == Placement::kHostShared) out.host_needs_segment[static_cast<size_t>(rp.host)] = 1;
  }
  out.group_of_rank.assign(p.ranks.size(), -1);
  for (size_t g = 0; g < p.groups.size(); ++g)
    for (int r : p.groups[g].ranks) out.group_of_rank[static_cast<size_t>(r)] = static_cast<int>(g);
  return out;
}

// Every rank decides from the same gathered facts, so in one process (the
// emulator runs every rank in one, and hands them one shared copy of the
// facts) the deployment is rebuilt and planned once and shared. Keyed by the
// facts' identity and the options; a handful of recent entries.
std::shared_ptr<const SharedPlan> plan_once(const RuntimeOptions& options,
                                            const std::shared_ptr<const GatheredFacts>& facts) {
  const EngramConfig& c = options.config;
  const ParallelLayout& l = options.layout;
  const std::string key = fmt::format("{}|{},{},{},{},{}|{},{},{},{},{}", options.placement_model, l.tp, l.dp, l.ep,
                                      l.elastic_ep, l.prefill_cp, c.cpu_offload, c.peer_shards,
                                      c.dp_shared_memory ? (*c.dp_shared_memory ? 1 : 0) : -1,
                                      static_cast<int>(c.shard_group), c.tokens_per_rank_max);
  struct Entry {
    std::shared_ptr<const GatheredFacts> facts;  // pins the identity while the entry lives
    std::string key;
    std::shared_ptr<const SharedPlan> plan;
  };
  static std::mutex mutex;
  static std::deque<Entry> recent;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (const Entry& e : recent)
      if (e.facts == facts && e.key == key) return e.plan;
  }
  // The same decision `plan` makes, from the gathered facts: hosts by
  // identity (hostname + boot id) in rank order.
  Deployment deployment;
  deployment.model = options.placement_model;
  deployment.layout = options.layout;
  deployment.config = options.config;
  std::map<std::pair<std::string, std::string>, int> host_index;
  for (const RankFacts& rank_facts : facts->ranks) {
    const PlacementFacts& p = rank_facts.placement;
    const RuntimeWireFacts f = rank_facts.extra_as<RuntimeWireFacts>();
    auto key_of_host = std::make_pair(p.host.hostname, p.host.boot_id);
    auto [it, inserted] = host_index.emplace(key_of_host, static_cast<int>(deployment.hosts.size()));
    if (inserted) {
      HostSpec host;
      host.name = key_of_host.first;
      host.boot_id = key_of_host.second;
      host.nvlink_domain = p.nvlink_domain;
      host.imex_channel = p.imex_channel;
      host.fabric_attribute = f.fabric_attribute;
      host.shm_mounted = f.shm_mounted;
      host.tmpfs_bytes_total = f.tmpfs_bytes_total;
      host.gpu_memory_bytes = f.gpu_memory_bytes;
      host.environment = static_cast<RuntimeEnvironment>(std::min<uint8_t>(f.environment, 3));
      deployment.hosts.push_back(std::move(host));
    }
    ++deployment.hosts[static_cast<size_t>(it->second)].gpu_count;
    deployment.rank_hosts.push_back(it->second);
  }
  WarningSink plan_sink;  // plan's warnings reach the caller's sink from the result, once
  auto plan = std::make_shared<const SharedPlan>(derive(plan_deployment(deployment, plan_sink)));
  std::lock_guard<std::mutex> lock(mutex);
  recent.push_front({facts, key, plan});
  if (recent.size() > 4) recent.pop_back();
  return plan;
}

}  // namespace

std::string host_table_segment_name(const std::string& job_id, int layer_id) {
  return fmt::format("engramlab-{}-layer{}", job_id, layer_id);
}

struct EngramRuntime::State {
  std::unique_ptr<Collectives> placement_group;  // node-local group or shard group
  std::unique_ptr<Collectives> host_group;       // every rank of this host
  bool is_host_writer = false;                   // creates and unlinks the node's segments
  int host_writer_world_rank = -1;               // the host's lowest world rank: host_group rank 0
  struct Table {
    const TableSpec* spec = nullptr;
    // device_collective: own shard in VMM memory, plus its host copy the CPU
    // lookup reads.
    DevicePtr shard_address = 0;
    uint64_t shard_allocation_bytes = 0;
    AllocationHandle shard_allocation = 0;
    std::vector<std::byte> shard_host;
    std::unique_ptr<RowShardLayout> layout;
    // device_peer
    std::optional<PeerShardTable> peer_table;
    // host placements
    std::unique_ptr<ShmMapping> segment;
    std::vector<std::byte> private_bytes;  // host_private: whole table; host_head_sharded: own heads
  };
  std::vector<Table> tables;
};

EngramRuntime::EngramRuntime(RankBackend& backend, RuntimeOptions options)
    : backend_(backend), options_(std::move(options)), state_(std::make_unique<State>()) {}

EngramRuntime::~EngramRuntime() {
  if (stopped_ || !state_) return;
  // Local clean-up only (a peer may be gone): unmap and free what this rank
  // holds; the writer also unlinks its segments. Users first, then unmap.
  if (backend_.device != nullptr) backend_.device->synchronize().ignore();
  for (State::Table& t : state_->tables) {
    if (t.peer_table) t.peer_table.reset();  // SharedMapping's destructor undoes this rank's part
    if (t.shard_address) {
      backend_.device->unmap(t.shard_address, t.shard_allocation_bytes).ignore();
      backend_.device->free_reservation(t.shard_address, t.shard_allocation_bytes).ignore();
    }
    if (t.shard_allocation) backend_.device->release(t.shard_allocation).ignore();
    if (t.segment) {
      std::string name = t.segment->name();
      t.segment.reset();
      if (state_->is_host_writer) backend_.shm->unlink(name).ignore();
    }
  }
}

Result<std::unique_ptr<EngramRuntime>> EngramRuntime::start(RankBackend& backend, const RuntimeOptions& options,
                                                           WarningSink& sink) {
  ENGRAM_CHECK(backend.world != nullptr && backend.probe != nullptr && backend.shm != nullptr);
  Collectives& world = *backend.world;
  const int me = world.world_rank();
  if (options.layout.world_size() != world.size()) {
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("layout: tp {} x dp {} = {} ranks, but the job has {} ranks; set tp and dp so that "
                              "tp * dp equals the world size",
                              options.layout.tp, options.layout.dp, options.layout.world_size(), world.size()),
                  {me, -1, "start"});
  }
  ENGRAM_RETURN_IF_ERROR(Status(validate(options.table_model)).with_context(me, -1, "start"));

  // 1. Facts, from every rank, before deciding anything.
  const PlacementFacts placement = backend.probe->facts();
  RuntimeWireFacts mine;
  mine.environment = static_cast<uint8_t>(placement.environment);
  auto shm = backend.shm->info();
  if (shm.is_ok()) {
    mine.shm_mounted = shm->mounted;
    mine.tmpfs_bytes_total = shm->tmpfs_bytes_total;  // the total, never the free space (rule 4)
  }
  if (backend.device != nullptr) {
    auto info = backend.device->info();
    if (info.is_ok()) {
      mine.has_device = 1;
      mine.fabric_attribute = info->fabric_attribute;
      mine.gpu_memory_bytes = info->memory_bytes_total;
    }
  }
  // 2. The same decision `plan` makes, from the gathered facts (shared by
  // every rank of one process that gathered the same ones).
  std::shared_ptr<const SharedPlan> shared;
  {
    auto all = gather_facts(world, placement, mine);
    if (!all.is_ok()) return std::move(all).take_status().with_context(me, -1, "gather facts");
    shared = plan_once(options, all.value());
  }
  if (!shared->plan.is_ok()) return Status(shared->plan.status()).with_context(me, -1, "decide placement");
  const PlanResult* plan = &shared->plan.value();
  for (const Warning& w : plan->warnings) sink.emit(w);
  const RankPlan& rank_plan = plan->ranks[static_cast<size_t>(me)];

  std::unique_ptr<EngramRuntime> runtime(new EngramRuntime(backend, options));
  RuntimeFacts& facts = runtime->facts_;
  facts.placement = rank_plan.placement;
  facts.node_local_group_size = rank_plan.node_local_group_size;
  facts.host_index = rank_plan.host;
  facts.host_count = static_cast<int>(plan->deployment.hosts.size());
  if (const int g = shared->group_of_rank[static_cast<size_t>(me)]; g >= 0)
    facts.reason = plan->groups[static_cast<size_t>(g)].reason;

  // 3. Groups. Every rank makes both splits, in the same order, whatever its
  // placement, so the world's collective sequence stays aligned.
  State& state = *runtime->state_;
  const bool device = is_device_placement(facts.placement);
  const int placement_color = device ? rank_plan.shard_group : rank_plan.node_local_group;
  const int placement_key = device ? rank_plan.shard_index : rank_plan.node_local_index;
  ENGRAM_ASSIGN_OR_RETURN(state.placement_group, world.split(placement_color, placement_key));
  ENGRAM_ASSIGN_OR_RETURN(state.host_group, world.split(rank_plan.host, me));
  state.is_host_writer = state.host_group->rank() == 0;
  // Every rank knows its host's writer from the plan (host_group orders by
  // world rank), so survivors can tell when it is the writer that is gone.
  state.host_writer_world_rank = shared->host_writer_world_rank[static_cast<size_t>(rank_plan.host)];
  ENGRAM_CHECK(state.host_writer_world_rank >= 0);
  ENGRAM_CHECK(state.is_host_writer == (state.host_writer_world_rank == me));

  // 4. Tables. A host needs a /dev/shm copy when any of its ranks decided
  // host_shared; every rank of the host takes part in agreeing on it.
  const bool host_needs_segment = shared->host_needs_segment[static_cast<size_t>(rank_plan.host)] != 0;
  Status built = runtime->build_tables(host_needs_segment);
  if (!built.is_ok()) return built;
  return runtime;
}

Status EngramRuntime::build_tables(bool host_needs_segment) {
  State& st = *state_;
  const ModelSpec& model = options_.table_model;
  st.tables.resize(model.tables.size());
  for (size_t i = 0; i < model.tables.size(); ++i) st.tables[i].spec = &model.tables[i];
  const int me = backend_.world->world_rank();

  // The host's segment rounds run on every rank of the host.
  ENGRAM_RETURN_IF_ERROR(build_host_segments(host_needs_segment));

  switch (facts_.placement) {
    case Placement::kHostShared:
      for (const State::Table& t : st.tables) ENGRAM_CHECK(t.segment != nullptr);
      return Status::ok();
    case Placement::kHostPrivate:
      for (State::Table& t : st.tables) {
        t.private_bytes.resize(t.spec->table_bytes());
        fill_table_rows(*t.spec, options_.fill_seed, 0, t.private_bytes);
        facts_.host_bytes += t.private_bytes.size();
      }
      return Status::ok();
    case Placement::kHostHeadSharded:
      for (State::Table& t : st.tables) {
        HeadShardRows rows = head_shard_rows(*t.spec, st.placement_group->size(), st.placement_group->rank());
        t.private_bytes.resize(static_cast<size_t>(rows.row_count) * t.spec->row_bytes());
        fill_table_rows(*t.spec, options_.fill_seed, rows.first_row, t.private_bytes);
        facts_.host_bytes += t.private_bytes.size();
      }
      return Status::ok();
    case Placement::kDeviceCollective:
    case Placement::kDevicePeer:
      if (backend_.device == nullptr)
        return Status(ErrorCode::kFailedPrecondition,
                      fmt::format("{} needs a GPU, and this rank has none; set cpu_offload: true for a host "
                                  "placement", placement_name(facts_.placement)),
                      {me, -1, "start"});
      return facts_.placement == Placement::kDevicePeer ? build_device_peer_tables()
                                                        : build_device_collective_shards();
  }
  return internal_error("unknown placement");
}

Status EngramRuntime::build_host_segments(bool host_needs_segment) {
  State& st = *state_;
  if (!host_needs_segment) return Status::ok();
  Collectives& host = *st.host_group;
  // The writer creates, then fills in chunks with an agreement after each,
  // so no reader waits on one collective for the whole fill (188.8 GiB at
  // host fill speed takes minutes; a collective's deadline is shorter). The
  // others then map read-only.
  Status created;
  if (st.is_host_writer) {
    for (State::Table& t : st.tables) {
      auto segment = backend_.shm->create(host_table_segment_name(options_.job_id, t.spec->layer_id), t.spec->table_bytes());
      if (!segment.is_ok()) {
        created = std::move(segment).take_status().with_context(host.world_rank(), -1, "shm_create");
        break;
      }
      t.segment = std::move(segment).value();
      facts_.shared_host_bytes += t.spec->table_bytes();
    }
  }
  const int writer_world_rank = st.host_writer_world_rank;
  int gone = -1;
  Status agreed = agree_on_status(host, created, "shm table create", &gone);
  for (State::Table& t : st.tables) {
    if (!agreed.is_ok()) break;
    const uint64_t row_bytes = t.spec->row_bytes();
    const int64_t rows_per_chunk = std::max<int64_t>(1, static_cast<int64_t>(options_.host_fill_chunk_bytes / row_bytes));
    // A full table takes minutes to fill: the writer shows how far it got.
    std::optional<Progress> progress;
    if (st.is_host_writer) {
      progress.emplace(fmt::format("rank {}: filling the /dev/shm table of layer {}", host.world_rank(),
                                   t.spec->layer_id),
                       "rows", static_cast<uint64_t>(t.spec->row_count()));
    }
    for (int64_t first = 0; first < t.spec->row_count() && agreed.is_ok(); first += rows_per_chunk) {
      if (st.is_host_writer) {
        const int64_t rows = std::min(rows_per_chunk, t.spec->row_count() - first);
        fill_table_rows(*t.spec, options_.fill_seed, first,
                        t.segment->bytes().subspan(static_cast<size_t>(first) * row_bytes,
                                                   static_cast<size_t>(rows) * row_bytes));
        progress->update(static_cast<uint64_t>(first + rows));
      }
      agreed = agree_on_status(host, Status::ok(), "shm table fill", &gone);
    }
  }
  if (agreed.is_ok()) {
    Status opened;
    if (!st.is_host_writer) {
      for (State::Table& t : st.tables) {
        auto segment =
            backend_.shm->open_read_only(host_table_segment_name(options_.job_id, t.spec->layer_id), t.spec->table_bytes());
        if (!segment.is_ok()) {
          opened = std::move(segment).take_status().with_context(host.world_rank(), -1, "shm_open");
          break;
        }
        t.segment = std::move(segment).value();
      }
    }
    agreed = agree_on_status(host, opened, "shm table open", &gone);
  }
  if (!agreed.is_ok()) {
    // Nothing outlives a failed start: unmap, and the writer unlinks what it
    // created (never a name it found taken: that segment is someone else's,
    // e.g. a live run's or a stale one the operator must look at). A dead
    // writer cannot unlink, and tmpfs keeps its files, so the survivors do
    // (names are job-unique: whatever exists under them is this job's).
    const bool writer_gone = gone == writer_world_rank || gone == kUnknownMemberGone;
    for (State::Table& t : st.tables) {
      const std::string name = host_table_segment_name(options_.job_id, t.spec->layer_id);
      const bool created_here = st.is_host_writer && t.segment != nullptr;
      t.segment.reset();
      if (created_here || (!st.is_host_writer && writer_gone)) {
        Status unlinked = backend_.shm->unlink(name);
        if (!unlinked.is_ok() && unlinked.code() != ErrorCode::kNotFound) {
          // Say so: a table-sized file may be left in /dev/shm.
          agreed = Status(agreed.code(), agreed.message() + "; also could not remove " + name + ": " +
                                             unlinked.to_string() + " (engramlab shm clean removes it)",
                          agreed.context());
        }
      }
    }
    facts_.shared_host_bytes = 0;
  }
  return agreed;
}

Status EngramRuntime::build_device_collective_shards() {
  State& st = *state_;
  DeviceMemory& device = *backend_.device;
  Collectives& group = *st.placement_group;
  const int me = group.world_rank();
  Status status;
  for (State::Table& t : st.tables) {
    t.layout = std::make_unique<RowShardLayout>(t.spec->row_count(), group.size());
    const uint64_t shard_bytes = static_cast<uint64_t>(t.layout->shard_rows(group.rank())) * t.spec->row_bytes();
    auto info = device.info();
    if (!info.is_ok()) { status = std::move(info).take_status().with_context(me, -1, "device info"); break; }
    const uint64_t bytes = round_up(std::max<uint64_t>(shard_bytes, 1), info->granularity_bytes);
    auto allocation = device.create(bytes, HandleType::kPosixFd);
    if (!allocation.is_ok()) { status = std::move(allocation).take_status().with_context(me, -1, "create"); break; }
    t.shard_allocation = *allocation;
    t.shard_allocation_bytes = bytes;
    auto address = device.reserve(bytes);
    if (!address.is_ok()) { status = std::move(address).take_status().with_context(me, -1, "reserve"); break; }
    status = device.map(*address, bytes, t.shard_allocation);
    if (!status.is_ok()) {
      device.free_reservation(*address, bytes).ignore();
      status = std::move(status).with_context(me, -1, "map");
      break;
    }
    t.shard_address = *address;
    status = device.set_access(t.shard_address, bytes);
    if (!status.is_ok()) { status = std::move(status).with_context(me, -1, "access"); break; }
    t.shard_host.resize(shard_bytes);
    fill_table_rows(*t.spec, options_.fill_seed, t.layout->shard_begin(group.rank()), t.shard_host);
    status = device.copy_to_device(t.shard_address, t.shard_host);
    if (!status.is_ok()) { status = std::move(status).with_context(me, -1, "fill"); break; }
    // The CPU lookup reads what the device holds, not what we meant to write.
    status = device.copy_from_device(t.shard_host, t.shard_address);
    if (!status.is_ok()) { status = std::move(status).with_context(me, -1, "read back"); break; }
    facts_.device_bytes += bytes;
  }
  Status agreed = agree_on_status(group, status, "device shard build");
  if (!agreed.is_ok()) {
    for (State::Table& t : st.tables) {
      if (t.shard_address) {
        device.unmap(t.shard_address, t.shard_allocation_bytes).ignore();
        device.free_reservation(t.shard_address, t.shard_allocation_bytes).ignore();
        t.shard_address = 0;
      }
      if (t.shard_allocation) device.release(t.shard_allocation).ignore();
      t.shard_allocation = 0;
    }
    facts_.device_bytes = 0;
  }
  return agreed;
}

Status EngramRuntime::build_device_peer_tables() {
  State& st = *state_;
  Collectives& group = *st.placement_group;
  for (State::Table& t : st.tables) {
    const TableSpec& spec = *t.spec;
    const uint64_t seed = options_.fill_seed;
    auto table = PeerShardTable::build(
        backend_, group, spec.row_count(), spec.row_bytes(), [&spec, seed](int64_t first_row, std::span<std::byte> rows) {
          fill_table_rows(spec, seed, first_row, rows);
          return Status::ok();
        });
    if (!table.is_ok()) {
      // Tables already built are torn down collectively by stop() or locally
      // by the destructor; this one left nothing behind.
      return std::move(table).take_status();
    }
    t.peer_table.emplace(std::move(table).value());
    facts_.handle_type = t.peer_table->handle_type();
    facts_.device_bytes += t.peer_table->shard_allocation_bytes();
  }
  return Status::ok();
}

Status EngramRuntime::lookup(int table_index, std::span<const int64_t> row_ids, int64_t tokens_per_rank_max,
                             std::span<uint16_t> output) {
  State& st = *state_;
  const int me = backend_.world->world_rank();
  if (stopped_) return Status(ErrorCode::kFailedPrecondition, "lookup after stop()", {me, -1, "lookup"});
  const bool known = table_index >= 0 && table_index < static_cast<int>(st.tables.size());
  const Status unknown = known ? Status::ok()
                               : Status(ErrorCode::kInvalidArgument,
                                        fmt::format("table index {} is out of range: the model has {} Engram tables "
                                                    "(0..{})", table_index, st.tables.size(),
                                                    static_cast<int>(st.tables.size()) - 1),
                                        {me, -1, "lookup"});
  // The collective placements still take their part in the step with an
  // unknown table (sized by table 0), so the group fails it on every rank
  // rather than waiting on this one; the others have no collective to join.
  const bool joins_group =
      facts_.placement == Placement::kDeviceCollective || facts_.placement == Placement::kHostHeadSharded;
  if (!known && (!joins_group || st.tables.empty())) return unknown;
  State::Table& t = st.tables[known ? static_cast<size_t>(table_index) : 0];
  LookupRequest request{t.spec, row_ids, tokens_per_rank_max, output};
  Collectives& group = *st.placement_group;
  if (!known) {
    // The ids and output are the caller's for a table we do not know:
    // contribute nothing, so no shape check fails the step early.
    request.table_unknown = true;
    request.row_ids = {};
    request.output = {};
    const Status joined = facts_.placement == Placement::kDeviceCollective
                              ? lookup_device_collective(group, request, *t.layout, t.shard_host)
                              : lookup_host_head_sharded(group, request, t.private_bytes);
    // The group's verdict is about the others; this rank's error is its index.
    if (joined.code() != ErrorCode::kOk && joined.code() != ErrorCode::kFailedPrecondition) return joined;
    return unknown;
  }
  switch (facts_.placement) {
    case Placement::kDeviceCollective:
      return lookup_device_collective(group, request, *t.layout, t.shard_host);
    case Placement::kDevicePeer: {
      const PeerShardTable& table = *t.peer_table;
      return lookup_device_peer_by_row(group, request, [&table](int64_t row, std::span<std::byte> bytes) {
        return table.read_row(row, bytes);
      });
    }
    case Placement::kHostShared:
      return lookup_host_shared(group, request, t.segment->data());
    case Placement::kHostHeadSharded:
      return lookup_host_head_sharded(group, request, t.private_bytes);
    case Placement::kHostPrivate:
      return lookup_host_private(group, request, t.private_bytes);
  }
  return internal_error("unknown placement");
}

Status EngramRuntime::stop() {
  if (stopped_) return Status::ok();
  stopped_ = true;
  State& st = *state_;
  Status first;
  const int me = backend_.world->world_rank();
  // Keeps the first failure, naming this rank and the step where the
  // backend's own error did not.
  auto keep_first = [&first, me](Status s) {
    if (first.is_ok() && !s.is_ok()) first = std::move(s).with_context(me, -1, "stop");
  };
  if (backend_.device != nullptr) keep_first(backend_.device->synchronize());  // users first, then unmap
  for (State::Table& t : st.tables) {
    if (t.peer_table) {
      keep_first(t.peer_table->teardown());
      t.peer_table.reset();
    }
    if (t.shard_address) {
      keep_first(backend_.device->unmap(t.shard_address, t.shard_allocation_bytes));
      keep_first(backend_.device->free_reservation(t.shard_address, t.shard_allocation_bytes));
      t.shard_address = 0;
    }
    if (t.shard_allocation) {
      keep_first(backend_.device->release(t.shard_allocation));
      t.shard_allocation = 0;
    }
  }
  // Readers unmap, the host agrees, then the writer unlinks.
  std::vector<std::string> names;
  for (State::Table& t : st.tables) {
    if (!t.segment) continue;
    names.push_back(t.segment->name());
    t.segment.reset();
  }
  Status barrier = st.host_group->barrier();
  // After the barrier every rank has unmapped. The writer unlinks; if the
  // barrier failed (a member is gone, perhaps the writer) every survivor
  // tries, since tmpfs would otherwise keep the files. Only one finds them.
  const bool unlink_here = st.is_host_writer || !barrier.is_ok();
  keep_first(std::move(barrier));
  if (unlink_here) {
    for (const std::string& name : names) {
      Status unlinked = backend_.shm->unlink(name);
      if (unlinked.code() != ErrorCode::kNotFound) keep_first(std::move(unlinked));
    }
  }
  return first;
}

}  // namespace engram
