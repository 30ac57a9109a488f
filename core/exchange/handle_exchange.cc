#include "core/exchange/handle_exchange.h"

#include <fmt/format.h>

#include <array>
#include <cstring>
#include <string_view>

#include "core/base/coverage_probe.h"
#include "core/exchange/gather_facts.h"
#include "core/plan/handle_type_plan.h"
#include "core/base/units.h"

namespace engram {

namespace {

// Steps as they travel in a phase record (one byte each).
constexpr std::array<std::string_view, 10> kSteps = {"facts",  "create", "export", "send",    "receive",
                                                     "import", "map",    "access", "reserve", "other"};

uint8_t step_index(std::string_view step) {
  for (size_t i = 0; i < kSteps.size(); ++i)
    if (kSteps[i] == step) return static_cast<uint8_t>(i);
  return static_cast<uint8_t>(kSteps.size() - 1);
}

// ------------------------------------------------------------ phase records

// What each rank tells the group after a phase: did it fail, where, with
// which peer, and how far it got (for POSIX sends: how many peers it reached).
struct PhaseRecord {
  uint8_t ok = 1;
  uint8_t step = 0;
  uint8_t code = 0;
  uint8_t pad = 0;
  int32_t peer = -1;
  int32_t progress = 0;
};
static_assert(sizeof(PhaseRecord) == 12);

struct PhaseResult {
  Status status;                     // ok, or why this rank must give up
  std::vector<PhaseRecord> records;  // empty when the round itself failed
  std::vector<std::byte> payloads;   // records.size() * payload size, in group-rank order
};

// One all-gather of {this rank's outcome, payload}: every rank learns who
// failed and where (so none waits for a peer that gave up), and the payload
// (e.g. a FABRIC handle) travels in the same round.
PhaseResult agree(Collectives& group, const Status& mine, int progress, const std::vector<int>& world_ranks,
                  const char* phase, std::span<const std::byte> payload = {}) {
  PhaseRecord record;
  record.ok = mine.is_ok() ? 1 : 0;
  record.step = step_index(mine.context().step);
  record.code = static_cast<uint8_t>(mine.code());
  record.peer = mine.context().peer;
  record.progress = progress;
  const size_t n = static_cast<size_t>(group.size());
  const size_t stride = sizeof(PhaseRecord) + payload.size();
  std::vector<std::byte> send(stride);
  std::memcpy(send.data(), &record, sizeof record);
  if (!payload.empty()) std::memcpy(send.data() + sizeof record, payload.data(), payload.size());
  std::vector<std::byte> all(stride * n);
  Status round = group.all_gather(send, all);
  PhaseResult out;
  const int me_world = group.world_rank();
  if (!round.is_ok()) {
    // The round fails only when a peer is gone: that is the root cause, even
    // where this rank failed too (perhaps because of it).
    out.status = std::move(round).with_context(me_world, -1, phase);
    if (!mine.is_ok())
      out.status = Status(out.status.code(), out.status.message() + "; this rank had also failed: " + mine.to_string(),
                          out.status.context());
    return out;
  }
  out.records.resize(n);
  out.payloads.resize(payload.size() * n);
  for (size_t r = 0; r < n; ++r) {
    std::memcpy(&out.records[r], all.data() + r * stride, sizeof(PhaseRecord));
    if (!payload.empty())
      std::memcpy(out.payloads.data() + r * payload.size(), all.data() + r * stride + sizeof(PhaseRecord),
                  payload.size());
  }
  if (!mine.is_ok()) {
    out.status = Status(mine).with_rank(me_world);
    return out;
  }
  for (size_t r = 0; r < n; ++r) {
    const PhaseRecord& other = out.records[r];
    if (other.ok) continue;
    const int failed = world_ranks[r];
    const std::string_view step = kSteps[std::min<size_t>(other.step, kSteps.size() - 1)];
    out.status = Status(ErrorCode::kUnavailable,
                        fmt::format("handle exchange abandoned: rank {} failed at step {}{} ({}); every rank of the "
                                    "group undid its part",
                                    failed, step, other.peer >= 0 ? fmt::format(" with peer {}", other.peer) : "",
                                    error_code_name(static_cast<ErrorCode>(other.code))),
                        {me_world, failed, std::string(step)});
    coverage_probe("exchange: cleanup after a peer's failure");
    return out;
  }
  return out;
}

// ------------------------------------------------------------ placement facts

// The exchange's own part of each rank's facts (core/gather_facts carries
// the placement facts around it).
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

}  // namespace

// ------------------------------------------------------------ import_and_map

Status unmap_and_release(DeviceMemory& device, PeerMappings& m, int world_rank) {
  Status first;
  auto keep = [&](Status s) {
    if (first.is_ok() && !s.is_ok()) first = std::move(s).with_rank(world_rank);
  };
  for (size_t p = 0; p < m.mapped.size(); ++p)
    if (m.mapped[p]) {
      keep(device.unmap(m.base + p * m.stride_bytes, m.stride_bytes));
      m.mapped[p] = false;
    }
  for (size_t p = 0; p < m.imported.size(); ++p)
    if (m.imported[p] != 0) {
      keep(device.release(m.imported[p]));
      m.imported[p] = 0;
    }
  if (m.base != 0) {
    keep(device.free_reservation(m.base, m.reserved_bytes()));
    m.base = 0;
  }
  return first;
}

Result<PeerMappings> import_and_map(DeviceMemory& device, const ImportRequest& request, const HandleSource& fetch) {
  const size_t n = request.world_ranks.size();
  ENGRAM_CHECK(request.group_rank >= 0 && static_cast<size_t>(request.group_rank) < n);
  ENGRAM_CHECK(request.allocation_bytes > 0 && request.own_allocation != 0);
  const int me = request.world_ranks[static_cast<size_t>(request.group_rank)];
  PeerMappings m;
  m.stride_bytes = request.allocation_bytes;
  m.imported.assign(n, 0);
  m.mapped.assign(n, false);

  auto fail = [&](Status error, int peer_group_rank, const char* step) -> Status {
    int peer = peer_group_rank >= 0 ? request.world_ranks[static_cast<size_t>(peer_group_rank)] : -1;
    Status undo = unmap_and_release(device, m, me);
    coverage_probe(fmt::format("exchange: cleanup after {} failure", step));
    Status out = std::move(error).with_context(me, peer, step);
    if (!undo.is_ok())
      out = Status(out.code(), out.message() + "; undoing it also failed: " + undo.to_string(), out.context());
    return out;
  };

  auto base = device.reserve(m.reserved_bytes());
  if (!base.is_ok()) return fail(base.status(), -1, "reserve");
  m.base = *base;

  for (size_t p = 0; p < n; ++p) {
    const int peer = static_cast<int>(p);
    AllocationHandle allocation = request.own_allocation;
    if (peer != request.group_rank) {
      auto handle = fetch(peer);
      if (!handle.is_ok()) return fail(handle.status(), peer, "receive");
      ENGRAM_CHECK(handle->type == request.type);
      auto imported = device.import_handle(*handle);
      // The fd did its job once imported (or failed to): close it either way.
      Status closed = handle->type == HandleType::kPosixFd ? device.close_fd(handle->fd) : Status::ok();
      if (!imported.is_ok()) return fail(imported.status(), peer, "import");
      m.imported[p] = *imported;
      if (!closed.is_ok()) return fail(closed, peer, "import");
      allocation = *imported;
    }
    const DevicePtr slot = m.base + p * m.stride_bytes;
    Status mapped = device.map(slot, m.stride_bytes, allocation);
    if (!mapped.is_ok()) return fail(mapped, peer, "map");
    m.mapped[p] = true;
    Status access = device.set_access(slot, m.stride_bytes);
    if (!access.is_ok()) return fail(access, peer, "access");
  }
  return m;
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
  own_allocation_ = std::exchange(other.own_allocation_, 0);
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
  unmap_and_release(*device_, mappings_, world_rank_).ignore();
  if (own_allocation_ != 0) device_->release(own_allocation_).ignore();
  own_allocation_ = 0;
  device_ = nullptr;
  group_ = nullptr;
}

DevicePtr SharedMapping::peer(int p) const {
  ENGRAM_CHECK(valid());
  ENGRAM_CHECK(p >= 0 && p < group_size());
  return mappings_.base + static_cast<uint64_t>(p) * mappings_.stride_bytes;
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
  keep(unmap_and_release(*device_, mappings_, world_rank_), "teardown_unmap");
  // The exporter keeps its allocation until every peer has unmapped it.
  keep(group_->barrier(), "teardown_barrier");
  keep(device_->release(own_allocation_), "teardown_release");
  own_allocation_ = 0;
  device_ = nullptr;
  group_ = nullptr;
  return first;
}

// ------------------------------------------------------------ the exchange

Result<SharedMapping> exchange_shareable_handles(RankBackend& backend, Collectives& group, uint64_t bytes_per_rank) {
  ENGRAM_CHECK(backend.device != nullptr && backend.probe != nullptr);
  DeviceMemory& device = *backend.device;
  const int me = group.rank();
  const int n = group.size();
  const int me_world = group.world_rank();
  ENGRAM_CHECK(me >= 0 && me < n);

  // Phase 0: facts from every rank, before anyone allocates.
  ExchangeFacts header;
  header.world_rank = me_world;
  header.requested_bytes = bytes_per_rank;
  const PlacementFacts placement = backend.probe->facts();
  Status local;
  auto info = device.info();
  if (info.is_ok()) {
    header.granularity_bytes = info->granularity_bytes;
    header.fabric_probe_ok = device.probe_fabric().is_ok() ? 1 : 0;
  } else {
    local = Status(info.status()).with_context(me_world, -1, "facts");
    header.ok = 0;
  }
  auto gathered_or = gather_facts(group, placement, header);
  if (!gathered_or.is_ok()) return std::move(gathered_or).take_status().with_context(me_world, -1, "facts");
  const std::shared_ptr<const GatheredFacts> gathered = std::move(gathered_or).value();
  if (gathered->took_second_round) coverage_probe("exchange: long host facts took a second round");
  if (!local.is_ok()) return local;
  std::vector<int> world_ranks(static_cast<size_t>(n));
  std::vector<HandleFacts> facts(static_cast<size_t>(n));
  std::vector<ExchangeFacts> headers(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const RankFacts& g = gathered->ranks[static_cast<size_t>(r)];
    const ExchangeFacts h = g.extra_as<ExchangeFacts>();
    headers[static_cast<size_t>(r)] = h;
    world_ranks[static_cast<size_t>(r)] = h.world_rank;
    facts[static_cast<size_t>(r)].placement = g.placement;
    facts[static_cast<size_t>(r)].fabric_probe_ok = h.fabric_probe_ok != 0;
    if (!h.ok)
      return Status(ErrorCode::kUnavailable,
                    fmt::format("handle exchange abandoned: rank {} could not read its device facts", h.world_rank),
                    {me_world, h.world_rank, "facts"});
  }
  // Sizes and granularity must agree, or slots would not line up.
  const ExchangeFacts& first = headers[0];
  for (int r = 0; r < n; ++r) {
    const ExchangeFacts& h = headers[static_cast<size_t>(r)];
    if (h.granularity_bytes != first.granularity_bytes || h.requested_bytes != first.requested_bytes)
      return Status(ErrorCode::kInvalidArgument,
                    fmt::format("handle exchange: rank {} asks for {} bytes at granularity {}, rank {} for {} bytes "
                                "at granularity {}: every rank of the group must share equal-sized allocations",
                                h.world_rank, h.requested_bytes, h.granularity_bytes, first.world_rank,
                                first.requested_bytes, first.granularity_bytes),
                    {me_world, h.world_rank, "sizes"});
  }
  if (bytes_per_rank == 0)
    return Status(ErrorCode::kInvalidArgument, "handle exchange: bytes_per_rank is 0; share at least one byte",
                  {me_world, -1, "sizes"});
  auto type = choose_handle_type(facts);
  if (!type.is_ok()) return std::move(type).take_status().with_context(me_world, -1, "handle_type");
  const uint64_t allocation_bytes = round_up(bytes_per_rank, first.granularity_bytes);

  // Phase 1: create and export this rank's allocation. Its outcome travels
  // in the next round (with the FABRIC handle, or after the POSIX sends), so
  // the exchange costs three collectives in all.
  AllocationHandle own = 0;
  ShareableHandle exported;
  bool export_fd_open = false;
  auto undo_own = [&] {
    if (export_fd_open) device.close_fd(exported.fd).ignore();
    export_fd_open = false;
    if (own != 0) device.release(own).ignore();
    own = 0;
  };
  Status exported_ok;
  auto created = device.create(allocation_bytes, *type);
  if (!created.is_ok()) {
    exported_ok = Status(created.status()).with_context(me_world, -1, "create");
  } else {
    own = *created;
    auto handle = device.export_handle(own, *type);
    if (!handle.is_ok()) {
      exported_ok = Status(handle.status()).with_context(me_world, -1, "export");
    } else {
      exported = *handle;
      export_fd_open = exported.type == HandleType::kPosixFd;
    }
  }
  if (!exported_ok.is_ok()) coverage_probe(fmt::format("exchange: cleanup after {} failure", exported_ok.context().step));

  // Phase 2: exchange handles, import and map.
  ImportRequest request{*type, allocation_bytes, me, world_ranks, own};
  Result<PeerMappings> mappings = Status(ErrorCode::kInternal, "not run");
  if (*type == HandleType::kFabric) {
    PhaseResult phase = agree(group, exported_ok, 0, world_ranks, "export", std::as_bytes(std::span(exported.fabric)));
    if (!phase.status.is_ok()) {
      undo_own();
      return phase.status;
    }
    mappings = import_and_map(device, request, [&](int peer) -> Result<ShareableHandle> {
      ShareableHandle h;
      h.type = HandleType::kFabric;
      std::memcpy(h.fabric.data(), phase.payloads.data() + static_cast<size_t>(peer) * kFabricHandleBytes,
                  kFabricHandleBytes);
      return h;
    });
  } else {
    ENGRAM_CHECK(backend.fds != nullptr);
    // Every rank sends to every peer first, then receives: sends never wait
    // for a receiver, so no order of ranks can deadlock.
    FdHeader fd_header{me, 0x454e4746, allocation_bytes};
    Status s = exported_ok;
    int sent = 0;
    for (int k = 1; k < n && s.is_ok(); ++k) {
      const int peer = (me + k) % n;
      Status sent_one = backend.fds->send_fd(world_ranks[static_cast<size_t>(peer)], exported.fd,
                                             std::as_bytes(std::span<const FdHeader>(&fd_header, 1)));
      if (!sent_one.is_ok()) {
        s = std::move(sent_one).with_context(me_world, world_ranks[static_cast<size_t>(peer)], "send");
        coverage_probe("exchange: cleanup after send failure");
        break;
      }
      ++sent;
    }
    // In flight, each message holds its own reference: this fd is done.
    if (export_fd_open) {
      Status closed = device.close_fd(exported.fd);
      export_fd_open = false;
      if (s.is_ok() && !closed.is_ok()) s = std::move(closed).with_context(me_world, -1, "send");
    }
    PhaseResult phase = agree(group, s, sent, world_ranks, "send");
    // Peer p sent to this rank iff this rank was among the first `progress`
    // it reached; those fds wait here and must be taken and closed.
    auto sent_to_me = [&](int p) {
      if (phase.records.empty() || p == me) return false;
      const int k = (me - p + n) % n;
      return k >= 1 && k <= phase.records[static_cast<size_t>(p)].progress;
    };
    std::vector<bool> fetched(static_cast<size_t>(n), false);
    auto drain = [&] {
      for (int p = 0; p < n; ++p) {
        if (fetched[static_cast<size_t>(p)] || !sent_to_me(p)) continue;
        auto stray = backend.fds->recv_fd(world_ranks[static_cast<size_t>(p)]);
        if (stray.is_ok()) device.close_fd(stray->fd).ignore();
        coverage_probe("exchange: drained an fd after failure");
      }
    };
    if (!phase.status.is_ok()) {
      drain();
      undo_own();
      return phase.status;
    }
    mappings = import_and_map(device, request, [&](int peer) -> Result<ShareableHandle> {
      fetched[static_cast<size_t>(peer)] = true;
      const int from = world_ranks[static_cast<size_t>(peer)];
      ENGRAM_ASSIGN_OR_RETURN(ReceivedFd received, backend.fds->recv_fd(from));
      FdHeader got;
      if (received.header.size() == sizeof got) std::memcpy(&got, received.header.data(), sizeof got);
      if (received.header.size() != sizeof got || got.magic != fd_header.magic || got.group_rank != peer ||
          got.allocation_bytes != allocation_bytes) {
        device.close_fd(received.fd).ignore();
        return Status(ErrorCode::kInternal,
                      fmt::format("received an fd from rank {} that is not its allocation of {} bytes for group "
                                  "rank {} (stale from an earlier exchange?)",
                                  from, allocation_bytes, peer),
                      {me_world, from, "receive"});
      }
      ShareableHandle h;
      h.type = HandleType::kPosixFd;
      h.fd = received.fd;
      return h;
    });
    if (!mappings.is_ok()) drain();
  }

  Status mapped = mappings.is_ok() ? Status::ok() : mappings.status();
  PhaseResult phase = agree(group, mapped, 0, world_ranks, "import");
  if (!phase.status.is_ok()) {
    if (mappings.is_ok()) unmap_and_release(device, *mappings, me_world).ignore();
    undo_own();
    return phase.status;
  }

  SharedMapping out;
  out.device_ = &device;
  out.group_ = &group;
  out.world_rank_ = me_world;
  out.group_rank_ = me;
  out.type_ = *type;
  out.world_ranks_ = std::move(world_ranks);
  out.own_allocation_ = own;
  out.mappings_ = std::move(*mappings);
  return out;
}

}  // namespace engram
