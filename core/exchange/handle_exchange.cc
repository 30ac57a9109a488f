#include "core/exchange/handle_exchange.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "core/base/coverage_probe.h"
#include "core/base/units.h"
#include "core/exchange/gather_facts.h"
#include "core/exchange/group_agreement.h"
#include "core/exchange/handle_type_plan.h"

namespace engram {
namespace {

constexpr std::string_view kWhat = "handle exchange";

// The exchange's own part of each rank's facts (core/exchange/gather_facts
// carries the placement facts around it). Counts and totals only: the chunk
// sizes themselves travel with the export's outcome, whose payload length
// every rank knows from the largest count announced here.
struct ExchangeFacts {
  int32_t world_rank = -1;
  uint8_t fabric_probe_ok = 0;
  uint8_t posix_fd_supported = 0;
  uint8_t ok = 1;
  uint8_t allow_unshared = 0;
  uint32_t chunk_count = 0;
  int32_t bad_chunk = -1;         // first chunk that is not a positive multiple of the granularity
  uint64_t bad_chunk_bytes = 0;
  uint64_t requested_bytes = 0;   // the chunks as asked, summed
  uint64_t total_bytes = 0;       // the chunks as mapped, summed
  uint64_t granularity_bytes = 0;
  uint64_t span_bytes = 0;        // ChunkExchangeOptions::span_bytes_per_peer
};
static_assert(sizeof(ExchangeFacts) == 56);

// "exchange: cleanup after <step> failure", one registered probe per step
// an exchange can fail at: create_and_export's (and the device steps under
// DeviceAllocation::create) and import_and_map's.
void probe_cleanup_after(std::string_view step) {
  if (step == "create") coverage_probe<"exchange: cleanup after create failure">();
  else if (step == "granularity") coverage_probe<"exchange: cleanup after granularity failure">();
  else if (step == "export") coverage_probe<"exchange: cleanup after export failure">();
  else if (step == "reserve") coverage_probe<"exchange: cleanup after reserve failure">();
  else if (step == "receive") coverage_probe<"exchange: cleanup after receive failure">();
  else if (step == "import") coverage_probe<"exchange: cleanup after import failure">();
  else if (step == "map") coverage_probe<"exchange: cleanup after map failure">();
  else if (step == "access") coverage_probe<"exchange: cleanup after access failure">();
  else coverage_probe<"exchange: cleanup after another step's failure">();
}

// What travels with each POSIX fd, so a receiver can tell a stray fd from
// the one it expects.
struct FdHeader {
  int32_t group_rank = -1;
  uint32_t magic = 0x454e4746;  // "ENGF"
  uint32_t chunk_index = 0;
  uint32_t chunk_count = 0;
  uint64_t chunk_bytes = 0;
};
static_assert(sizeof(FdHeader) == 24);

// What every rank agreed before anyone allocates.
struct ExchangePlan {
  int group_rank = -1;
  int world_rank = -1;
  std::vector<int> world_ranks;  // group rank -> world rank
  HandleType type = HandleType::kPosixFd;  // kNone: unshared, plain memory
  Status unshared_reason;
  std::vector<uint64_t> own_chunks;   // as mapped, granularity multiples
  std::vector<uint32_t> counts;       // per group rank, as announced
  std::vector<uint64_t> totals;       // per group rank, bytes as announced
  uint32_t max_count = 0;
  uint64_t span_bytes = 0;            // 0: each span is its chunks
  // Per group rank, every chunk's bytes: known once the export's outcome
  // arrives (decode_chunks).
  std::vector<std::vector<uint64_t>> chunks;
  int size() const { return static_cast<int>(world_ranks.size()); }
  uint64_t span_of(size_t p) const { return span_bytes != 0 ? span_bytes : totals[p]; }
  size_t sizes_payload_bytes() const { return static_cast<size_t>(max_count) * sizeof(uint64_t); }
};

// This rank's chunks and their exported handles. The outcome travels in the
// next agreement (with the FABRIC handles, or after the POSIX sends).
struct Export {
  std::vector<DeviceAllocation> own;
  std::vector<ShareableHandle> handles;
  std::vector<bool> fd_open;  // POSIX export fds this rank must still close
  Status status;              // why the check, create or export failed

  Status close_fds(DeviceMemory& device) {
    Status first;
    for (size_t c = 0; c < handles.size(); ++c) {
      if (!fd_open[c]) continue;
      fd_open[c] = false;
      Status closed = device.close_fd(handles[c].fd);
      if (first.is_ok()) first = std::move(closed);
    }
    return first;
  }
  void undo(DeviceMemory& device) {
    close_fds(device).ignore();
    for (auto a = own.rbegin(); a != own.rend(); ++a) a->release().ignore();
  }
};

// How the handles moved: either the group agreed to give up before anyone
// imported (every rank returns at once) or this rank imported and mapped
// what it could, and its outcome goes to the final agreement.
struct Transfer {
  Status abandoned;
  Result<PeerMappings> mappings = internal_error("handle transfer did not run");
  std::vector<DevicePtr> spans;  // per group rank, where mapped
};

// Yields group rank `peer`'s chunk `chunk`; a POSIX fd is then import_and_map's to close.
using HandleSource = std::function<Result<ShareableHandle>(int peer, int chunk)>;

// ------------------------------------------------------------ 1. facts and plan

// This rank's facts, its chunks as they will be mapped into `own`.
ExchangeFacts local_facts(DeviceMemory& device, int me_world, std::span<const uint64_t> chunk_bytes,
                          const ChunkExchangeOptions& options, std::vector<uint64_t>& own, Status& local) {
  ExchangeFacts header;
  header.world_rank = me_world;
  header.allow_unshared = options.allow_unshared ? 1 : 0;
  header.span_bytes = options.span_bytes_per_peer;
  header.chunk_count = static_cast<uint32_t>(chunk_bytes.size());
  auto info = device.info();
  if (!info.is_ok()) {
    local = Status(info.status()).with_context(me_world, -1, "facts");
    header.ok = 0;
    return header;
  }
  const uint64_t granularity = info->granularity_bytes;
  ENGRAM_CHECK(granularity > 0);
  header.granularity_bytes = granularity;
  header.fabric_probe_ok = device.probe_fabric().is_ok() ? 1 : 0;
  header.posix_fd_supported = info->posix_fd_supported ? 1 : 0;
  own.reserve(chunk_bytes.size());
  for (size_t c = 0; c < chunk_bytes.size(); ++c) {
    const uint64_t asked = chunk_bytes[c];
    const uint64_t bytes = options.round_up_to_granularity ? round_up(asked, granularity) : asked;
    header.requested_bytes += asked;
    header.total_bytes += bytes;
    own.push_back(bytes);
    if (header.bad_chunk < 0 && (bytes == 0 || bytes % granularity != 0)) {
      header.bad_chunk = static_cast<int32_t>(c);
      header.bad_chunk_bytes = asked;
    }
  }
  return header;
}

Status invalid(int me_world, int peer, const char* step, std::string message) {
  return Status(ErrorCode::kInvalidArgument, "handle exchange: " + std::move(message), {me_world, peer, step});
}

// Every rank runs these checks on the same facts, so all refuse alike, before
// anyone allocates; each error names the rank at fault as the peer.
Status check_chunks(const std::vector<ExchangeFacts>& headers, const ChunkExchangeOptions& options, int me_world) {
  const ExchangeFacts& first = headers[0];
  for (const ExchangeFacts& h : headers) {
    if (h.granularity_bytes != first.granularity_bytes)
      return invalid(me_world, h.world_rank, "sizes",
                     fmt::format("rank {} maps at a granularity of {} bytes, rank {} at {} bytes: spans of one "
                                 "group must line up alike on every rank",
                                 h.world_rank, h.granularity_bytes, first.world_rank, first.granularity_bytes));
    if (h.allow_unshared != first.allow_unshared || h.span_bytes != first.span_bytes)
      return invalid(me_world, h.world_rank, "sizes",
                     fmt::format("rank {} asks for a span of {} bytes per peer ({}), rank {} for {} bytes ({}): "
                                 "every rank must pass the same options",
                                 h.world_rank, h.span_bytes, h.allow_unshared ? "plain memory allowed" : "shared only",
                                 first.world_rank, first.span_bytes,
                                 first.allow_unshared ? "plain memory allowed" : "shared only"));
  }
  if (options.require_equal_sizes) {
    for (const ExchangeFacts& h : headers) {
      if (h.requested_bytes != first.requested_bytes)
        return invalid(me_world, h.world_rank, "sizes",
                       fmt::format("rank {} asks for {} bytes at granularity {}, rank {} for {} bytes at granularity "
                                   "{}: every rank of the group must share equal-sized allocations",
                                   h.world_rank, h.requested_bytes, h.granularity_bytes, first.world_rank,
                                   first.requested_bytes, first.granularity_bytes));
    }
    if (first.requested_bytes == 0)
      return invalid(me_world, -1, "sizes", "bytes_per_rank is 0; share at least one byte");
  }
  for (const ExchangeFacts& h : headers) {
    if (h.chunk_count == 0)
      return invalid(me_world, h.world_rank, "sizes", fmt::format("rank {} shares no chunks; give at least one",
                                                                  h.world_rank));
    if (h.bad_chunk >= 0)
      return invalid(me_world, h.world_rank, "sizes",
                     fmt::format("rank {}'s chunk {} is {} bytes, not a positive multiple of the {}-byte "
                                 "granularity",
                                 h.world_rank, h.bad_chunk, h.bad_chunk_bytes, h.granularity_bytes));
    if (h.span_bytes != 0 && h.total_bytes > h.span_bytes)
      return invalid(me_world, h.world_rank, "sizes",
                     fmt::format("rank {}'s {} chunks need {} bytes, more than the span of {} bytes reserved per "
                                 "peer",
                                 h.world_rank, h.chunk_count, h.total_bytes, h.span_bytes));
  }
  return Status::ok();
}

// Facts from every rank, before anyone allocates; every rank then decides
// the handle type and sizes alike.
Result<ExchangePlan> agree_on_plan(RankBackend& backend, Collectives& group, std::span<const uint64_t> chunk_bytes,
                                   const ChunkExchangeOptions& options) {
  ExchangePlan plan;
  plan.group_rank = group.rank();
  plan.world_rank = group.world_rank();
  const int me_world = plan.world_rank;
  Status local;
  const ExchangeFacts header = local_facts(*backend.device, me_world, chunk_bytes, options, plan.own_chunks, local);
  auto gathered_or = gather_facts(group, backend.probe->facts(), header);
  if (!gathered_or.is_ok()) return std::move(gathered_or).take_status().with_context(me_world, -1, "facts");
  const std::shared_ptr<const GatheredFacts> gathered = std::move(gathered_or).value();
  if (gathered->took_second_round) coverage_probe<"exchange: long host facts took a second round">();
  if (!local.is_ok()) return local;

  const size_t n = gathered->ranks.size();
  std::vector<HandleFacts> facts(n);
  std::vector<ExchangeFacts> headers(n);
  plan.world_ranks.resize(n);
  plan.counts.resize(n);
  plan.totals.resize(n);
  for (size_t r = 0; r < n; ++r) {
    const RankFacts& g = gathered->ranks[r];
    headers[r] = g.extra_as<ExchangeFacts>();
    plan.world_ranks[r] = headers[r].world_rank;
    plan.counts[r] = headers[r].chunk_count;
    plan.totals[r] = headers[r].total_bytes;
    plan.max_count = std::max(plan.max_count, headers[r].chunk_count);
    facts[r] = HandleFacts::of(g.placement, headers[r].fabric_probe_ok != 0, headers[r].posix_fd_supported != 0);
    if (!headers[r].ok)
      return Status(ErrorCode::kUnavailable,
                    fmt::format("handle exchange abandoned: rank {} could not read its device facts",
                                headers[r].world_rank),
                    {me_world, headers[r].world_rank, "facts"});
  }
  ENGRAM_RETURN_IF_ERROR(check_chunks(headers, options, me_world));
  plan.span_bytes = headers[0].span_bytes;
  auto type = choose_handle_type(facts);
  if (type.is_ok()) {
    plan.type = *type;
  } else if (options.allow_unshared && type.status().code() == ErrorCode::kFailedPrecondition) {
    // The consumer can live without sharing: the plan's reason stays with the result.
    coverage_probe<"exchange: no handle type works, plain memory instead">();
    plan.type = HandleType::kNone;
    plan.unshared_reason = std::move(type).take_status().with_context(me_world, -1, "handle_type");
  } else {
    return std::move(type).take_status().with_context(me_world, -1, "handle_type");
  }
  return plan;
}

// Every rank's chunk sizes from the export's outcome, checked against what
// each announced with its facts.
Status decode_chunks(const GroupVerdict& verdict, ExchangePlan& plan) {
  const size_t n = plan.world_ranks.size();
  plan.chunks.assign(n, {});
  for (size_t p = 0; p < n; ++p) {
    const std::span<const std::byte> sent = verdict.payload(p);
    ENGRAM_CHECK(sent.size() >= plan.sizes_payload_bytes());
    uint64_t total = 0;
    for (uint32_t c = 0; c < plan.counts[p]; ++c) {
      uint64_t bytes = 0;
      std::memcpy(&bytes, sent.data() + c * sizeof(uint64_t), sizeof bytes);
      plan.chunks[p].push_back(bytes);
      total += bytes;
    }
    if (total != plan.totals[p])
      return Status(ErrorCode::kInternal,
                    fmt::format("handle exchange: rank {} announced {} chunks of {} bytes in all, then sent chunk "
                                "sizes adding to {} bytes",
                                plan.world_ranks[p], plan.counts[p], plan.totals[p], total),
                    {plan.world_rank, plan.world_ranks[p], "chunks"});
  }
  return Status::ok();
}

// ------------------------------------------------------------ 2. create and export

// A count this rank expects of a peer and the peer's announcement differ:
// this rank refuses before allocating (the agreement tells the others).
Status check_expected_counts(const ExchangePlan& plan, const ChunkExchangeOptions& options) {
  if (options.expected_chunk_counts.empty()) return Status::ok();
  if (options.expected_chunk_counts.size() != plan.counts.size())
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("handle exchange: {} expected chunk counts for a group of {}",
                              options.expected_chunk_counts.size(), plan.counts.size()),
                  {plan.world_rank, -1, "chunks"});
  for (size_t p = 0; p < plan.counts.size(); ++p) {
    const int expected = options.expected_chunk_counts[p];
    if (expected != static_cast<int>(plan.counts[p]))
      return Status(ErrorCode::kInvalidArgument,
                    fmt::format("handle exchange: rank {} announced {} chunks; rank {} expects {} from it",
                                plan.world_ranks[p], plan.counts[p], plan.world_rank, expected),
                    {plan.world_rank, plan.world_ranks[p], "chunks"});
  }
  return Status::ok();
}

Export create_and_export(DeviceMemory& device, const ExchangePlan& plan, const ChunkExchangeOptions& options) {
  Export out;
  out.status = check_expected_counts(plan, options);
  if (!out.status.is_ok()) {
    coverage_probe<"exchange: a peer's chunk count differs from the expected">();
    return out;
  }
  for (uint64_t bytes : plan.own_chunks) {
    auto created = DeviceAllocation::create(device, bytes, plan.type);
    if (!created.is_ok()) {
      out.status = Status(created.status()).with_context(plan.world_rank, -1, "create");
      break;
    }
    out.own.push_back(std::move(created).value());
    if (plan.type == HandleType::kNone) continue;  // plain memory: nothing to export
    auto handle = device.export_handle(out.own.back().handle(), plan.type);
    if (!handle.is_ok()) {
      out.status = Status(handle.status()).with_context(plan.world_rank, -1, "export");
      break;
    }
    out.handles.push_back(*handle);
    out.fd_open.push_back(handle->type == HandleType::kPosixFd);
  }
  if (!out.status.is_ok()) probe_cleanup_after(out.status.context().step);
  return out;
}

// This rank's chunk sizes, padded to the largest count: the payload every
// rank sends with its export's outcome.
std::vector<std::byte> sizes_payload(const ExchangePlan& plan, size_t extra_bytes) {
  std::vector<std::byte> out(plan.sizes_payload_bytes() + extra_bytes);
  std::memcpy(out.data(), plan.own_chunks.data(), plan.own_chunks.size() * sizeof(uint64_t));
  return out;
}

// ------------------------------------------------------------ 3. import and map

// Reserve one range (every peer's span, or this rank's alone when
// unshared), then per group rank and chunk in order: fetch, import, map at
// the span's next offset, grant access (own chunks map `own`). On failure
// it undoes all of that and returns an error naming this rank, the peer
// (world rank) and the step (receive, import, map, access, reserve).
Result<PeerMappings> import_and_map(DeviceMemory& device, const ExchangePlan& plan,
                                    const std::vector<DeviceAllocation>& own, const HandleSource& fetch,
                                    std::vector<DevicePtr>& spans) {
  const size_t n = plan.world_ranks.size();
  ENGRAM_CHECK(plan.group_rank >= 0 && static_cast<size_t>(plan.group_rank) < n);
  ENGRAM_CHECK(own.size() == plan.own_chunks.size() && plan.chunks.size() == n);
  const int me = plan.world_rank;
  const bool shared = plan.type != HandleType::kNone;
  PeerMappings m;

  auto fail = [&](Status error, int peer_group_rank, const char* step) -> Status {
    const int peer = peer_group_rank >= 0 ? plan.world_ranks[static_cast<size_t>(peer_group_rank)] : -1;
    Status undo = m.release(me);
    probe_cleanup_after(step);
    Status out = std::move(error).with_context(me, peer, step);
    if (!undo.is_ok())
      out = Status(out.code(), out.message() + "; undoing it also failed: " + undo.to_string(), out.context());
    return out;
  };

  uint64_t range_bytes = 0;
  for (size_t p = 0; p < n; ++p)
    if (shared || static_cast<int>(p) == plan.group_rank) range_bytes += plan.span_of(p);
  auto range = DeviceRange::reserve(device, range_bytes);
  if (!range.is_ok()) return fail(range.status(), -1, "reserve");
  m.range = std::move(range).value();

  spans.assign(n, 0);
  DevicePtr next_span = m.range.address();
  for (size_t p = 0; p < n; ++p) {
    const int peer = static_cast<int>(p);
    const bool mine = peer == plan.group_rank;
    if (!shared && !mine) continue;
    spans[p] = next_span;
    next_span += plan.span_of(p);
    DevicePtr at = spans[p];
    for (size_t c = 0; c < plan.chunks[p].size(); ++c) {
      const uint64_t bytes = plan.chunks[p][c];
      AllocationHandle allocation = mine ? own[c].handle() : 0;
      if (!mine) {
        auto handle = fetch(peer, static_cast<int>(c));
        if (!handle.is_ok()) return fail(handle.status(), peer, "receive");
        ENGRAM_CHECK(handle->type == plan.type);
        auto imported = DeviceAllocation::import(device, *handle, bytes);
        // The fd did its job once imported (or failed to): close it either way.
        Status closed = handle->type == HandleType::kPosixFd ? device.close_fd(handle->fd) : Status::ok();
        if (!imported.is_ok()) return fail(imported.status(), peer, "import");
        m.imported.push_back(std::move(imported).value());
        if (!closed.is_ok()) return fail(closed, peer, "import");
        allocation = m.imported.back().handle();
      }
      auto mapped = DeviceMapping::map(device, at, bytes, allocation);
      if (!mapped.is_ok()) return fail(mapped.status(), peer, "map");
      m.chunks.push_back(std::move(mapped).value());
      Status access = m.chunks.back().grant_access();
      if (!access.is_ok()) return fail(access, peer, "access");
      at += bytes;
    }
  }
  return m;
}

// The export's outcome with `payload` (sizes first) in one agreement; then
// every rank's chunk sizes. False, with `out` saying why, when the group
// gave up or the sizes do not match what was announced.
bool agree_on_export(Collectives& group, ExchangePlan& plan, const Export& exported,
                     std::span<const std::byte> payload, GroupVerdict& verdict, Transfer& out) {
  verdict = agree_on_outcome(group, exported.status, kWhat, 0, payload);
  if (verdict.peer_failed) coverage_probe<"exchange: cleanup after a peer's failure">();
  if (!verdict.status.is_ok()) {
    out.abandoned = std::move(verdict.status);
    return false;
  }
  Status decoded = decode_chunks(verdict, plan);
  if (decoded.is_ok()) return true;
  out.mappings = std::move(decoded);
  return false;
}

// Unshared: plain memory, nothing to send; the outcome (and the sizes) in
// one agreement, then this rank maps its own chunks.
Transfer transfer_none(DeviceMemory& device, Collectives& group, ExchangePlan& plan, Export& exported) {
  Transfer out;
  GroupVerdict verdict;
  if (!agree_on_export(group, plan, exported, sizes_payload(plan, 0), verdict, out)) return out;
  out.mappings = import_and_map(device, plan, exported.own, {}, out.spans);
  return out;
}

// FABRIC: the 64-byte handles travel with the export's outcome in one
// all-gather; each rank then imports from what it received.
Transfer transfer_fabric(DeviceMemory& device, Collectives& group, ExchangePlan& plan, Export& exported) {
  Transfer out;
  std::vector<std::byte> payload = sizes_payload(plan, static_cast<size_t>(plan.max_count) * kFabricHandleBytes);
  for (size_t c = 0; c < exported.handles.size(); ++c)
    std::memcpy(payload.data() + plan.sizes_payload_bytes() + c * kFabricHandleBytes,
                exported.handles[c].fabric.data(), kFabricHandleBytes);
  GroupVerdict verdict;
  if (!agree_on_export(group, plan, exported, payload, verdict, out)) return out;
  const size_t handles_at = plan.sizes_payload_bytes();
  out.mappings = import_and_map(
      device, plan, exported.own,
      [&](int peer, int chunk) -> Result<ShareableHandle> {
        ShareableHandle h;
        h.type = HandleType::kFabric;
        const std::span<const std::byte> sent = verdict.payload(static_cast<size_t>(peer));
        ENGRAM_CHECK(sent.size() == handles_at + static_cast<size_t>(plan.max_count) * kFabricHandleBytes);
        std::memcpy(h.fabric.data(), sent.data() + handles_at + static_cast<size_t>(chunk) * kFabricHandleBytes,
                    kFabricHandleBytes);
        return h;
      },
      out.spans);
  return out;
}

// POSIX: every rank sends one fd per chunk to every peer first, then
// receives: sends never wait for a receiver, so no order of ranks can
// deadlock. Returns how many messages went out (peers in the order
// (me + k) % n, k = 1, 2, ...; per peer its chunks in order).
int send_fds_to_peers(RankBackend& backend, const ExchangePlan& plan, Export& exported, Status& status) {
  const int me = plan.group_rank;
  const int n = plan.size();
  const uint32_t count = static_cast<uint32_t>(exported.handles.size());
  int sent = 0;
  for (int k = 1; k < n && status.is_ok(); ++k) {
    const int peer_world = plan.world_ranks[static_cast<size_t>((me + k) % n)];
    for (uint32_t c = 0; c < count && status.is_ok(); ++c) {
      const FdHeader header{me, FdHeader{}.magic, c, count, plan.own_chunks[c]};
      Status sent_one = backend.fds->send_fd(peer_world, exported.handles[c].fd,
                                             std::as_bytes(std::span<const FdHeader>(&header, 1)));
      if (!sent_one.is_ok()) {
        // The peer is named; the export fds close below, sent or not.
        status = std::move(sent_one).with_context(plan.world_rank, peer_world, "send");
        coverage_probe<"exchange: cleanup after send failure">();
        break;
      }
      ++sent;
    }
  }
  // In flight, each message holds its own reference: these fds are done.
  Status closed = exported.close_fds(*backend.device);
  if (status.is_ok() && !closed.is_ok()) status = std::move(closed).with_context(plan.world_rank, -1, "send");
  return sent;
}

// Receives group rank `peer`'s chunk `chunk` and checks it is the one
// expected; `taken` counts every message taken off the channel.
Result<ShareableHandle> receive_fd(RankBackend& backend, const ExchangePlan& plan, int peer, int chunk, int& taken) {
  const int from = plan.world_ranks[static_cast<size_t>(peer)];
  ENGRAM_ASSIGN_OR_RETURN(ReceivedFd received, backend.fds->recv_fd(from));
  ++taken;
  const std::vector<uint64_t>& chunks = plan.chunks[static_cast<size_t>(peer)];
  FdHeader got;
  if (received.header.size() == sizeof got) std::memcpy(&got, received.header.data(), sizeof got);
  if (received.header.size() != sizeof got || got.magic != FdHeader{}.magic || got.group_rank != peer ||
      got.chunk_index != static_cast<uint32_t>(chunk) || got.chunk_count != chunks.size() ||
      got.chunk_bytes != chunks[static_cast<size_t>(chunk)]) {
    backend.device->close_fd(received.fd).ignore();
    return Status(ErrorCode::kInternal,
                  fmt::format("received an fd from rank {} that is not its chunk {} of {} ({} bytes) for group "
                              "rank {} (stale from an earlier exchange?)",
                              from, chunk, chunks.size(), chunks[static_cast<size_t>(chunk)], peer),
                  {plan.world_rank, from, "receive"});
  }
  ShareableHandle h;
  h.type = HandleType::kPosixFd;
  h.fd = received.fd;
  return h;
}

Transfer transfer_posix(RankBackend& backend, Collectives& group, ExchangePlan& plan, Export& exported) {
  ENGRAM_CHECK(backend.fds != nullptr);
  const int me = plan.group_rank;
  const int n = plan.size();
  Status sent_status = exported.status;
  const int sent = send_fds_to_peers(backend, plan, exported, sent_status);
  GroupVerdict verdict = agree_on_outcome(group, sent_status, kWhat, sent, sizes_payload(plan, 0));
  if (verdict.peer_failed) coverage_probe<"exchange: cleanup after a peer's failure">();

  // Peer p sent this rank the chunks among its first `progress` messages
  // that were addressed here; those fds wait here and must be taken and
  // closed. Counts come from the facts: known even when decoding failed.
  std::vector<int> taken(static_cast<size_t>(n), 0);
  auto drain = [&] {
    for (int p = 0; p < n; ++p) {
      if (!verdict.round_ok() || p == me) continue;
      const int k = (me - p + n) % n;
      const int count = static_cast<int>(plan.counts[static_cast<size_t>(p)]);
      const int reached = verdict.record(static_cast<size_t>(p)).progress;
      const int to_me = std::clamp(reached - (k - 1) * count, 0, count);
      for (int left = to_me - taken[static_cast<size_t>(p)]; left > 0; --left) {
        auto stray = backend.fds->recv_fd(plan.world_ranks[static_cast<size_t>(p)]);
        if (stray.is_ok()) backend.device->close_fd(stray->fd).ignore();
        coverage_probe<"exchange: drained an fd after failure">();
      }
    }
  };
  Transfer out;
  if (!verdict.status.is_ok()) {
    drain();
    out.abandoned = std::move(verdict.status);
    return out;
  }
  Status decoded = decode_chunks(verdict, plan);
  if (!decoded.is_ok()) {
    drain();
    out.mappings = std::move(decoded);
    return out;
  }
  out.mappings = import_and_map(
      *backend.device, plan, exported.own,
      [&](int peer, int chunk) { return receive_fd(backend, plan, peer, chunk, taken[static_cast<size_t>(peer)]); },
      out.spans);
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
  for (auto chunk = chunks.rbegin(); chunk != chunks.rend(); ++chunk) keep(chunk->unmap());
  for (auto allocation = imported.rbegin(); allocation != imported.rend(); ++allocation) keep(allocation->release());
  keep(range.free());
  chunks.clear();
  imported.clear();
  return first;
}

// ------------------------------------------------------------ SharedChunks

SharedChunks& SharedChunks::operator=(SharedChunks&& other) noexcept {
  if (this == &other) return *this;
  release_locally();
  device_ = std::exchange(other.device_, nullptr);
  group_ = std::exchange(other.group_, nullptr);
  world_rank_ = other.world_rank_;
  group_rank_ = other.group_rank_;
  type_ = other.type_;
  unshared_reason_ = std::move(other.unshared_reason_);
  world_ranks_ = std::move(other.world_ranks_);
  chunk_bytes_ = std::move(other.chunk_bytes_);
  chunk_offsets_ = std::move(other.chunk_offsets_);
  spans_ = std::move(other.spans_);
  span_bytes_per_peer_ = other.span_bytes_per_peer_;
  own_ = std::move(other.own_);
  other.own_.clear();
  mappings_ = std::move(other.mappings_);
  other.mappings_ = {};
  return *this;
}

SharedChunks::~SharedChunks() {
  if (valid()) coverage_probe<"exchange: mapping destroyed without teardown">();
  release_locally();
}

void SharedChunks::release_locally() {
  if (!valid()) return;
  // Teardown order (docs/design.md section 5): let this device's work that may
  // still read peer memory finish before the mappings go.
  device_->synchronize().ignore();
  mappings_.release(world_rank_).ignore();
  for (auto a = own_.rbegin(); a != own_.rend(); ++a) a->release().ignore();
  own_.clear();
  device_ = nullptr;
  group_ = nullptr;
}

// Sizes outlive teardown (callers report them afterwards); addresses do not.
int SharedChunks::chunk_count(int peer) const {
  ENGRAM_CHECK(peer >= 0 && peer < group_size() && chunk_bytes_.size() == world_ranks_.size());
  return static_cast<int>(chunk_bytes_[static_cast<size_t>(peer)].size());
}

uint64_t SharedChunks::chunk_bytes(int peer, int chunk) const {
  ENGRAM_CHECK(chunk >= 0 && chunk < chunk_count(peer));
  return chunk_bytes_[static_cast<size_t>(peer)][static_cast<size_t>(chunk)];
}

DevicePtr SharedChunks::chunk(int peer, int chunk) const {
  ENGRAM_CHECK(chunk >= 0 && chunk < chunk_count(peer));
  ENGRAM_CHECK(valid() && mapped(peer));
  return spans_[static_cast<size_t>(peer)] + chunk_offsets_[static_cast<size_t>(peer)][static_cast<size_t>(chunk)];
}

DevicePtr SharedChunks::span(int peer) const {
  ENGRAM_CHECK(valid() && peer >= 0 && peer < group_size() && mapped(peer));
  return spans_[static_cast<size_t>(peer)];
}

uint64_t SharedChunks::span_bytes(int peer) const {
  if (span_bytes_per_peer_ != 0) return span_bytes_per_peer_;
  const int last = chunk_count(peer) - 1;  // the exchange refuses a rank with no chunks
  return chunk_offsets_[static_cast<size_t>(peer)][static_cast<size_t>(last)] + chunk_bytes(peer, last);
}

Status SharedChunks::teardown() {
  if (!valid()) return Status::ok();
  Status first;
  auto keep = [&](Status s, const char* step) {
    if (first.is_ok() && !s.is_ok()) first = std::move(s).with_context(world_rank_, -1, step);
  };
  // Users first: nobody may still read a peer's memory when it goes away.
  keep(device_->synchronize(), "teardown_synchronize");
  keep(group_->barrier(), "teardown_barrier");
  keep(mappings_.release(world_rank_), "teardown_unmap");
  // The exporter keeps its chunks until every peer has unmapped them.
  keep(group_->barrier(), "teardown_barrier");
  for (auto a = own_.rbegin(); a != own_.rend(); ++a) keep(a->release(), "teardown_release");
  own_.clear();
  device_ = nullptr;
  group_ = nullptr;
  return first;
}

std::vector<DevicePtr> SharedMapping::peer_pointers() const {
  std::vector<DevicePtr> out;
  out.reserve(static_cast<size_t>(group_size()));
  for (int p = 0; p < group_size(); ++p) out.push_back(peer(p));
  return out;
}

// ------------------------------------------------------------ the exchange

Result<SharedChunks> exchange_shareable_chunks(RankBackend& backend, Collectives& group,
                                               std::span<const uint64_t> chunk_bytes,
                                               const ChunkExchangeOptions& options) {
  ENGRAM_CHECK(backend.device != nullptr && backend.probe != nullptr);
  ENGRAM_CHECK(group.rank() >= 0 && group.rank() < group.size());
  DeviceMemory& device = *backend.device;

  // 1. Facts from every rank; the handle type and sizes, decided alike.
  ENGRAM_ASSIGN_OR_RETURN(ExchangePlan plan, agree_on_plan(backend, group, chunk_bytes, options));
  // 2. This rank's chunks, exported.
  Export exported = create_and_export(device, plan, options);
  // 3. Handles to every peer; import and map theirs.
  Transfer transfer = plan.type == HandleType::kFabric  ? transfer_fabric(device, group, plan, exported)
                      : plan.type == HandleType::kNone ? transfer_none(device, group, plan, exported)
                                                       : transfer_posix(backend, group, plan, exported);
  if (!transfer.abandoned.is_ok()) {
    exported.undo(device);
    return std::move(transfer.abandoned);
  }
  // 4. Every rank mapped every peer, or every rank undoes its part.
  const Status mapped = transfer.mappings.is_ok() ? Status::ok() : transfer.mappings.status();
  GroupVerdict verdict = agree_on_outcome(group, mapped, kWhat);
  if (verdict.peer_failed) coverage_probe<"exchange: cleanup after a peer's failure">();
  if (!verdict.status.is_ok()) {
    if (transfer.mappings.is_ok()) transfer.mappings->release(plan.world_rank).ignore();
    exported.undo(device);
    return std::move(verdict.status);
  }

  SharedChunks out;
  out.device_ = &device;
  out.group_ = &group;
  out.world_rank_ = plan.world_rank;
  out.group_rank_ = plan.group_rank;
  out.type_ = plan.type;
  out.unshared_reason_ = std::move(plan.unshared_reason);
  out.world_ranks_ = std::move(plan.world_ranks);
  out.chunk_bytes_ = std::move(plan.chunks);
  for (const std::vector<uint64_t>& chunks : out.chunk_bytes_) {
    std::vector<uint64_t>& offsets = out.chunk_offsets_.emplace_back();
    uint64_t at = 0;
    for (uint64_t bytes : chunks) {
      offsets.push_back(at);
      at += bytes;
    }
  }
  out.spans_ = std::move(transfer.spans);
  out.span_bytes_per_peer_ = plan.span_bytes;
  out.own_ = std::move(exported.own);
  out.mappings_ = std::move(transfer.mappings).value();
  ENGRAM_CHECK(out.chunk_bytes_.size() == static_cast<size_t>(out.group_size()));
  return out;
}

Result<SharedMapping> exchange_shareable_handles(RankBackend& backend, Collectives& group, uint64_t bytes_per_rank) {
  ChunkExchangeOptions options;
  options.round_up_to_granularity = true;
  options.require_equal_sizes = true;
  const uint64_t chunks[] = {bytes_per_rank};
  ENGRAM_ASSIGN_OR_RETURN(SharedChunks shared, exchange_shareable_chunks(backend, group, chunks, options));
  return SharedMapping(std::move(shared));
}

Result<HandleType> default_handle_type(DeviceMemory& device) {
  ENGRAM_ASSIGN_OR_RETURN(DeviceInfo info, device.info());
  if (device.probe_fabric().is_ok()) return HandleType::kFabric;
  if (info.posix_fd_supported) return HandleType::kPosixFd;
  coverage_probe<"exchange: default handle type is none">();
  return HandleType::kNone;
}

}  // namespace engram
