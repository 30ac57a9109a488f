#include "core/exchange/handle_exchange.h"

#include <fmt/format.h>

#include <cstring>
#include <functional>

#include "core/base/coverage_probe.h"
#include "core/base/units.h"
#include "core/exchange/gather_facts.h"
#include "core/exchange/group_agreement.h"
#include "core/plan/handle_type_plan.h"

namespace engram {
namespace {

constexpr std::string_view kWhat = "handle exchange";

// The exchange's own part of each rank's facts (core/exchange/gather_facts
// carries the placement facts around it).
struct ExchangeFacts {
  int32_t world_rank = -1;
  uint8_t fabric_probe_ok = 0;
  uint8_t ok = 1;
  uint16_t pad = 0;
  uint64_t requested_bytes = 0;
  uint64_t granularity_bytes = 0;
};
static_assert(sizeof(ExchangeFacts) == 24);

// What travels with each POSIX fd, so a receiver can tell a stray fd from
// the one it expects.
struct FdHeader {
  int32_t group_rank = -1;
  uint32_t magic = 0x454e4746;  // "ENGF"
  uint64_t allocation_bytes = 0;
};

// What every rank agreed before anyone allocates.
struct ExchangePlan {
  int group_rank = -1;
  int world_rank = -1;
  std::vector<int> world_ranks;  // group rank -> world rank
  HandleType type = HandleType::kPosixFd;
  uint64_t allocation_bytes = 0;  // granularity-rounded, equal on every rank
  int size() const { return static_cast<int>(world_ranks.size()); }
};

// This rank's allocation and its exported handle. The outcome travels in the
// next agreement (with the FABRIC handle, or after the POSIX sends).
struct Export {
  DeviceAllocation own;
  ShareableHandle handle;
  bool fd_open = false;  // a POSIX export fd this rank must close
  Status status;         // why create or export failed

  Status close_fd(DeviceMemory& device) {
    if (!fd_open) return Status::ok();
    fd_open = false;
    return device.close_fd(handle.fd);
  }
  void undo(DeviceMemory& device) {
    close_fd(device).ignore();
    own.release().ignore();
  }
};

// How the handles moved: either the group agreed to give up before anyone
// imported (every rank returns at once) or this rank imported and mapped
// what it could, and its outcome goes to the final agreement.
struct Transfer {
  Status abandoned;
  Result<PeerMappings> mappings = internal_error("handle transfer did not run");
};

// Yields group rank `peer`'s handle; a POSIX fd is then import_and_map's to close.
using HandleSource = std::function<Result<ShareableHandle>(int peer)>;

// ------------------------------------------------------------ 1. facts and plan

ExchangeFacts local_facts(DeviceMemory& device, int me_world, uint64_t bytes_per_rank, Status& local) {
  ExchangeFacts header;
  header.world_rank = me_world;
  header.requested_bytes = bytes_per_rank;
  auto info = device.info();
  if (info.is_ok()) {
    header.granularity_bytes = info->granularity_bytes;
    header.fabric_probe_ok = device.probe_fabric().is_ok() ? 1 : 0;
  } else {
    local = Status(info.status()).with_context(me_world, -1, "facts");
    header.ok = 0;
  }
  return header;
}

// Sizes and granularity must agree, or slots would not line up.
Status check_equal_sizes(const std::vector<ExchangeFacts>& headers, int me_world) {
  const ExchangeFacts& first = headers[0];
  for (const ExchangeFacts& h : headers) {
    if (h.granularity_bytes != first.granularity_bytes || h.requested_bytes != first.requested_bytes)
      return Status(ErrorCode::kInvalidArgument,
                    fmt::format("handle exchange: rank {} asks for {} bytes at granularity {}, rank {} for {} bytes "
                                "at granularity {}: every rank of the group must share equal-sized allocations",
                                h.world_rank, h.requested_bytes, h.granularity_bytes, first.world_rank,
                                first.requested_bytes, first.granularity_bytes),
                    {me_world, h.world_rank, "sizes"});
  }
  if (first.requested_bytes == 0)
    return Status(ErrorCode::kInvalidArgument, "handle exchange: bytes_per_rank is 0; share at least one byte",
                  {me_world, -1, "sizes"});
  return Status::ok();
}

// Facts from every rank, before anyone allocates; every rank then decides
// the handle type and sizes alike.
Result<ExchangePlan> agree_on_plan(RankBackend& backend, Collectives& group, uint64_t bytes_per_rank) {
  ExchangePlan plan;
  plan.group_rank = group.rank();
  plan.world_rank = group.world_rank();
  const int me_world = plan.world_rank;
  Status local;
  const ExchangeFacts header = local_facts(*backend.device, me_world, bytes_per_rank, local);
  auto gathered_or = gather_facts(group, backend.probe->facts(), header);
  if (!gathered_or.is_ok()) return std::move(gathered_or).take_status().with_context(me_world, -1, "facts");
  const std::shared_ptr<const GatheredFacts> gathered = std::move(gathered_or).value();
  if (gathered->took_second_round) coverage_probe("exchange: long host facts took a second round");
  if (!local.is_ok()) return local;

  const size_t n = gathered->ranks.size();
  std::vector<HandleFacts> facts(n);
  std::vector<ExchangeFacts> headers(n);
  plan.world_ranks.resize(n);
  for (size_t r = 0; r < n; ++r) {
    const RankFacts& g = gathered->ranks[r];
    headers[r] = g.extra_as<ExchangeFacts>();
    plan.world_ranks[r] = headers[r].world_rank;
    facts[r] = HandleFacts::of(g.placement, headers[r].fabric_probe_ok != 0);
    if (!headers[r].ok)
      return Status(ErrorCode::kUnavailable,
                    fmt::format("handle exchange abandoned: rank {} could not read its device facts",
                                headers[r].world_rank),
                    {me_world, headers[r].world_rank, "facts"});
  }
  ENGRAM_RETURN_IF_ERROR(check_equal_sizes(headers, me_world));
  auto type = choose_handle_type(facts);
  if (!type.is_ok()) return std::move(type).take_status().with_context(me_world, -1, "handle_type");
  plan.type = *type;
  plan.allocation_bytes = round_up(bytes_per_rank, headers[0].granularity_bytes);
  return plan;
}

// ------------------------------------------------------------ 2. create and export

Export create_and_export(DeviceMemory& device, const ExchangePlan& plan) {
  Export out;
  auto created = DeviceAllocation::create(device, plan.allocation_bytes, plan.type);
  if (!created.is_ok()) {
    out.status = Status(created.status()).with_context(plan.world_rank, -1, "create");
  } else {
    out.own = std::move(created).value();
    auto handle = device.export_handle(out.own.handle(), plan.type);
    if (!handle.is_ok()) {
      out.status = Status(handle.status()).with_context(plan.world_rank, -1, "export");
    } else {
      out.handle = *handle;
      out.fd_open = out.handle.type == HandleType::kPosixFd;
    }
  }
  if (!out.status.is_ok()) coverage_probe(fmt::format("exchange: cleanup after {} failure", out.status.context().step));
  return out;
}

// ------------------------------------------------------------ 3. import and map

// Reserve one range, then per group rank in order: fetch, import, map, grant
// access (the own slot maps `own`). On failure it undoes all of that and
// returns an error naming this rank, the peer (world rank) and the step
// (receive, import, map, access, reserve).
Result<PeerMappings> import_and_map(DeviceMemory& device, const ExchangePlan& plan, AllocationHandle own,
                                    const HandleSource& fetch) {
  const size_t n = plan.world_ranks.size();
  ENGRAM_CHECK(plan.group_rank >= 0 && static_cast<size_t>(plan.group_rank) < n);
  ENGRAM_CHECK(plan.allocation_bytes > 0 && own != 0);
  const int me = plan.world_rank;
  PeerMappings m;
  m.stride_bytes = plan.allocation_bytes;
  m.imported.resize(n);
  m.slots.resize(n);

  auto fail = [&](Status error, int peer_group_rank, const char* step) -> Status {
    const int peer = peer_group_rank >= 0 ? plan.world_ranks[static_cast<size_t>(peer_group_rank)] : -1;
    Status undo = m.release(me);
    coverage_probe(fmt::format("exchange: cleanup after {} failure", step));
    Status out = std::move(error).with_context(me, peer, step);
    if (!undo.is_ok())
      out = Status(out.code(), out.message() + "; undoing it also failed: " + undo.to_string(), out.context());
    return out;
  };

  auto range = DeviceRange::reserve(device, m.stride_bytes * n);
  if (!range.is_ok()) return fail(range.status(), -1, "reserve");
  m.range = std::move(range).value();

  for (size_t p = 0; p < n; ++p) {
    const int peer = static_cast<int>(p);
    AllocationHandle allocation = own;
    if (peer != plan.group_rank) {
      auto handle = fetch(peer);
      if (!handle.is_ok()) return fail(handle.status(), peer, "receive");
      ENGRAM_CHECK(handle->type == plan.type);
      auto imported = DeviceAllocation::import(device, *handle, m.stride_bytes);
      // The fd did its job once imported (or failed to): close it either way.
      Status closed = handle->type == HandleType::kPosixFd ? device.close_fd(handle->fd) : Status::ok();
      if (!imported.is_ok()) return fail(imported.status(), peer, "import");
      m.imported[p] = std::move(imported).value();
      if (!closed.is_ok()) return fail(closed, peer, "import");
      allocation = m.imported[p].handle();
    }
    auto mapped = DeviceMapping::map(device, m.slot(peer), m.stride_bytes, allocation);
    if (!mapped.is_ok()) return fail(mapped.status(), peer, "map");
    m.slots[p] = std::move(mapped).value();
    Status access = m.slots[p].grant_access();
    if (!access.is_ok()) return fail(access, peer, "access");
  }
  return m;
}

// FABRIC: the 64-byte handles travel with the export's outcome in one
// all-gather; each rank then imports from what it received.
Transfer transfer_fabric(DeviceMemory& device, Collectives& group, const ExchangePlan& plan, Export& exported) {
  Transfer out;
  GroupVerdict verdict = agree_on_outcome(group, exported.status, kWhat, 0,
                                          std::as_bytes(std::span(exported.handle.fabric)));
  if (verdict.peer_failed) coverage_probe("exchange: cleanup after a peer's failure");
  if (!verdict.status.is_ok()) {
    out.abandoned = std::move(verdict.status);
    return out;
  }
  out.mappings = import_and_map(device, plan, exported.own.handle(), [&](int peer) -> Result<ShareableHandle> {
    ShareableHandle h;
    h.type = HandleType::kFabric;
    const std::span<const std::byte> sent = verdict.payload(static_cast<size_t>(peer));
    ENGRAM_CHECK(sent.size() == kFabricHandleBytes);
    std::memcpy(h.fabric.data(), sent.data(), kFabricHandleBytes);
    return h;
  });
  return out;
}

// POSIX: every rank sends its fd to every peer first, then receives: sends
// never wait for a receiver, so no order of ranks can deadlock. Returns how
// many peers were reached (in the order (me + k) % n, k = 1, 2, ...).
int send_fd_to_peers(RankBackend& backend, const ExchangePlan& plan, Export& exported, Status& status) {
  const int me = plan.group_rank;
  const int n = plan.size();
  const FdHeader header{me, FdHeader{}.magic, plan.allocation_bytes};
  int sent = 0;
  for (int k = 1; k < n && status.is_ok(); ++k) {
    const int peer_world = plan.world_ranks[static_cast<size_t>((me + k) % n)];
    Status sent_one =
        backend.fds->send_fd(peer_world, exported.handle.fd, std::as_bytes(std::span<const FdHeader>(&header, 1)));
    if (!sent_one.is_ok()) {
      status = std::move(sent_one).with_context(plan.world_rank, peer_world, "send");
      coverage_probe("exchange: cleanup after send failure");
      break;
    }
    ++sent;
  }
  // In flight, each message holds its own reference: this fd is done.
  Status closed = exported.close_fd(*backend.device);
  if (status.is_ok() && !closed.is_ok()) status = std::move(closed).with_context(plan.world_rank, -1, "send");
  return sent;
}

// Receives group rank `peer`'s fd and checks it is the allocation expected.
Result<ShareableHandle> receive_fd(RankBackend& backend, const ExchangePlan& plan, int peer) {
  const int from = plan.world_ranks[static_cast<size_t>(peer)];
  ENGRAM_ASSIGN_OR_RETURN(ReceivedFd received, backend.fds->recv_fd(from));
  FdHeader got;
  if (received.header.size() == sizeof got) std::memcpy(&got, received.header.data(), sizeof got);
  if (received.header.size() != sizeof got || got.magic != FdHeader{}.magic || got.group_rank != peer ||
      got.allocation_bytes != plan.allocation_bytes) {
    backend.device->close_fd(received.fd).ignore();
    return Status(ErrorCode::kInternal,
                  fmt::format("received an fd from rank {} that is not its allocation of {} bytes for group "
                              "rank {} (stale from an earlier exchange?)",
                              from, plan.allocation_bytes, peer),
                  {plan.world_rank, from, "receive"});
  }
  ShareableHandle h;
  h.type = HandleType::kPosixFd;
  h.fd = received.fd;
  return h;
}

Transfer transfer_posix(RankBackend& backend, Collectives& group, const ExchangePlan& plan, Export& exported) {
  ENGRAM_CHECK(backend.fds != nullptr);
  const int me = plan.group_rank;
  const int n = plan.size();
  Status sent_status = exported.status;
  const int sent = send_fd_to_peers(backend, plan, exported, sent_status);
  GroupVerdict verdict = agree_on_outcome(group, sent_status, kWhat, sent);
  if (verdict.peer_failed) coverage_probe("exchange: cleanup after a peer's failure");

  // Peer p sent to this rank iff this rank was among the first `progress` it
  // reached; those fds wait here and must be taken and closed.
  std::vector<bool> fetched(static_cast<size_t>(n), false);
  auto drain = [&] {
    for (int p = 0; p < n; ++p) {
      if (!verdict.round_ok() || p == me || fetched[static_cast<size_t>(p)]) continue;
      const int k = (me - p + n) % n;
      if (k < 1 || k > verdict.record(static_cast<size_t>(p)).progress) continue;
      auto stray = backend.fds->recv_fd(plan.world_ranks[static_cast<size_t>(p)]);
      if (stray.is_ok()) backend.device->close_fd(stray->fd).ignore();
      coverage_probe("exchange: drained an fd after failure");
    }
  };
  Transfer out;
  if (!verdict.status.is_ok()) {
    drain();
    out.abandoned = std::move(verdict.status);
    return out;
  }
  out.mappings = import_and_map(*backend.device, plan, exported.own.handle(), [&](int peer) {
    fetched[static_cast<size_t>(peer)] = true;
    return receive_fd(backend, plan, peer);
  });
  if (!out.mappings.is_ok()) drain();
  return out;
}

}  // namespace

// ------------------------------------------------------------ PeerMappings

Status PeerMappings::release(int world_rank) {
  Status first;
  auto keep = [&](Status s) {
    if (first.is_ok() && !s.is_ok()) first = std::move(s).with_rank(world_rank);
  };
  // Last made, first undone (as destructors would): a backend that keeps
  // its mappings and handles sorted drops each from the end.
  for (auto slot = slots.rbegin(); slot != slots.rend(); ++slot) keep(slot->unmap());
  for (auto allocation = imported.rbegin(); allocation != imported.rend(); ++allocation) keep(allocation->release());
  keep(range.free());
  return first;
}

// ------------------------------------------------------------ SharedMapping

SharedMapping& SharedMapping::operator=(SharedMapping&& other) noexcept {
  if (this == &other) return *this;
  release_locally();
  device_ = std::exchange(other.device_, nullptr);
  group_ = std::exchange(other.group_, nullptr);
  world_rank_ = other.world_rank_;
  group_rank_ = other.group_rank_;
  type_ = other.type_;
  world_ranks_ = std::move(other.world_ranks_);
  own_allocation_ = std::move(other.own_allocation_);
  mappings_ = std::move(other.mappings_);
  other.mappings_ = {};
  return *this;
}

SharedMapping::~SharedMapping() {
  if (valid()) coverage_probe("exchange: mapping destroyed without teardown");
  release_locally();
}

void SharedMapping::release_locally() {
  if (!valid()) return;
  // Teardown order (DESIGN.md section 5): let this device's work that may
  // still read peer memory finish before the mappings go.
  device_->synchronize().ignore();
  mappings_.release(world_rank_).ignore();
  own_allocation_.release().ignore();
  device_ = nullptr;
  group_ = nullptr;
}

DevicePtr SharedMapping::peer(int p) const {
  ENGRAM_CHECK(valid());
  ENGRAM_CHECK(p >= 0 && p < group_size());
  return mappings_.slot(p);
}

std::vector<DevicePtr> SharedMapping::peer_pointers() const {
  std::vector<DevicePtr> out;
  out.reserve(static_cast<size_t>(group_size()));
  for (int p = 0; p < group_size(); ++p) out.push_back(peer(p));
  return out;
}

Status SharedMapping::teardown() {
  if (!valid()) return Status::ok();
  Status first;
  auto keep = [&](Status s, const char* step) {
    if (first.is_ok() && !s.is_ok()) first = std::move(s).with_context(world_rank_, -1, step);
  };
  // Users first: nobody may still read a peer's memory when it goes away.
  keep(device_->synchronize(), "teardown_synchronize");
  keep(group_->barrier(), "teardown_barrier");
  keep(mappings_.release(world_rank_), "teardown_unmap");
  // The exporter keeps its allocation until every peer has unmapped it.
  keep(group_->barrier(), "teardown_barrier");
  keep(own_allocation_.release(), "teardown_release");
  device_ = nullptr;
  group_ = nullptr;
  return first;
}

// ------------------------------------------------------------ the exchange

Result<SharedMapping> exchange_shareable_handles(RankBackend& backend, Collectives& group, uint64_t bytes_per_rank) {
  ENGRAM_CHECK(backend.device != nullptr && backend.probe != nullptr);
  ENGRAM_CHECK(group.rank() >= 0 && group.rank() < group.size());
  DeviceMemory& device = *backend.device;

  // 1. Facts from every rank; the handle type and sizes, decided alike.
  ENGRAM_ASSIGN_OR_RETURN(ExchangePlan plan, agree_on_plan(backend, group, bytes_per_rank));
  // 2. This rank's allocation, exported.
  Export exported = create_and_export(device, plan);
  // 3. Handles to every peer; import and map theirs.
  Transfer transfer = plan.type == HandleType::kFabric ? transfer_fabric(device, group, plan, exported)
                                                       : transfer_posix(backend, group, plan, exported);
  if (!transfer.abandoned.is_ok()) {
    exported.undo(device);
    return std::move(transfer.abandoned);
  }
  // 4. Every rank mapped every peer, or every rank undoes its part.
  const Status mapped = transfer.mappings.is_ok() ? Status::ok() : transfer.mappings.status();
  GroupVerdict verdict = agree_on_outcome(group, mapped, kWhat);
  if (verdict.peer_failed) coverage_probe("exchange: cleanup after a peer's failure");
  if (!verdict.status.is_ok()) {
    if (transfer.mappings.is_ok()) transfer.mappings->release(plan.world_rank).ignore();
    exported.undo(device);
    return std::move(verdict.status);
  }

  SharedMapping out;
  out.device_ = &device;
  out.group_ = &group;
  out.world_rank_ = plan.world_rank;
  out.group_rank_ = plan.group_rank;
  out.type_ = plan.type;
  out.world_ranks_ = std::move(plan.world_ranks);
  out.own_allocation_ = std::move(exported.own);
  out.mappings_ = std::move(transfer.mappings).value();
  return out;
}

}  // namespace engram
