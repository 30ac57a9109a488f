#include "core/exchange/weight_sharing.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "core/base/coverage_probe.h"

namespace engram {
namespace {

// One rank's list on the wire: per tensor a u32 name length, the name, a
// u64 byte count.
std::vector<std::byte> encode(std::span<const TensorSpec> tensors) {
  std::vector<std::byte> out;
  auto put = [&](const void* data, size_t n) {
    const auto* p = static_cast<const std::byte*>(data);
    out.insert(out.end(), p, p + n);
  };
  for (const TensorSpec& t : tensors) {
    const uint32_t name_bytes = static_cast<uint32_t>(t.name.size());
    put(&name_bytes, sizeof name_bytes);
    put(t.name.data(), t.name.size());
    put(&t.bytes, sizeof t.bytes);
  }
  return out;
}

// Decodes `length` bytes of one rank's list; false when they do not parse.
bool decode(std::span<const std::byte> in, std::vector<TensorSpec>& out) {
  size_t at = 0;
  auto take = [&](void* data, size_t n) {
    if (in.size() - at < n) return false;
    std::memcpy(data, in.data() + at, n);
    at += n;
    return true;
  };
  while (at < in.size()) {
    uint32_t name_bytes = 0;
    TensorSpec t;
    if (!take(&name_bytes, sizeof name_bytes) || in.size() - at < name_bytes) return false;
    t.name.assign(reinterpret_cast<const char*>(in.data() + at), name_bytes);
    at += name_bytes;
    if (!take(&t.bytes, sizeof t.bytes)) return false;
    out.push_back(std::move(t));
  }
  return true;
}

struct ListHeader {
  int32_t world_rank = -1;
  uint32_t pad = 0;
  uint64_t length_bytes = 0;
};

// Every rank's list and world rank, in group-rank order: the lengths, then
// the lists padded to the longest (all_gather takes equal lengths).
Result<std::vector<std::vector<TensorSpec>>> gather_tensor_lists(Collectives& group, std::span<const TensorSpec> mine,
                                                                 std::vector<int>& world_ranks) {
  const int me_world = group.world_rank();
  const size_t n = static_cast<size_t>(group.size());
  const std::vector<std::byte> encoded = encode(mine);
  const ListHeader my_header{me_world, 0, encoded.size()};
  std::vector<ListHeader> headers(n);
  Status gathered = group.all_gather(std::as_bytes(std::span<const ListHeader>(&my_header, 1)),
                                     std::as_writable_bytes(std::span<ListHeader>(headers)));
  if (!gathered.is_ok()) return std::move(gathered).with_context(me_world, -1, "tensor_lists");
  uint64_t longest = 0;
  for (const ListHeader& h : headers) longest = std::max(longest, h.length_bytes);
  std::vector<std::byte> padded(longest), all(longest * n);
  std::copy(encoded.begin(), encoded.end(), padded.begin());
  if (longest > 0) {
    gathered = group.all_gather(padded, all);
    if (!gathered.is_ok()) return std::move(gathered).with_context(me_world, -1, "tensor_lists");
  }
  std::vector<std::vector<TensorSpec>> out(n);
  world_ranks.resize(n);
  for (size_t r = 0; r < n; ++r) {
    world_ranks[r] = headers[r].world_rank;
    const auto list = std::span<const std::byte>(all).subspan(r * longest, headers[r].length_bytes);
    ENGRAM_CHECK(decode(list, out[r]));  // every rank encoded with encode()
  }
  return out;
}

// Each rank checks every rank's list, so all refuse alike before anything
// is allocated; `world_ranks` names them.
Status check_lists(const std::vector<std::vector<TensorSpec>>& lists, const std::vector<int>& world_ranks,
                   int me_world) {
  for (size_t r = 0; r < lists.size(); ++r) {
    const int who = world_ranks[r];
    auto refuse = [&](std::string why) {
      return Status(ErrorCode::kInvalidArgument, fmt::format("weight sharing: rank {} {}", who, why),
                    {me_world, who, "tensor_lists"});
    };
    if (lists[r].empty()) return refuse("shares no tensors; give at least one");
    std::set<std::string_view> names;
    for (size_t i = 0; i < lists[r].size(); ++i) {
      const TensorSpec& t = lists[r][i];
      if (t.name.empty()) return refuse(fmt::format("names its tensor {} with an empty name", i));
      if (t.bytes == 0) return refuse(fmt::format("lists tensor '{}' with 0 bytes", t.name));
      if (!names.insert(t.name).second) return refuse(fmt::format("lists tensor '{}' twice", t.name));
    }
  }
  return Status::ok();
}

}  // namespace

Result<WeightSharing> WeightSharing::create(RankBackend& backend, Collectives& group, std::span<const TensorSpec> mine,
                                            WeightSharingOptions options) {
  const int me_world = group.world_rank();
  std::vector<int> world_ranks;
  ENGRAM_ASSIGN_OR_RETURN(std::vector<std::vector<TensorSpec>> lists, gather_tensor_lists(group, mine, world_ranks));
  ENGRAM_RETURN_IF_ERROR(check_lists(lists, world_ranks, me_world));

  ChunkExchangeOptions exchange;
  exchange.round_up_to_granularity = true;  // page-aligned peer ranges
  exchange.allow_unshared = options.allow_unshared;
  for (const std::vector<TensorSpec>& list : lists) exchange.expected_chunk_counts.push_back(static_cast<int>(list.size()));
  std::vector<uint64_t> chunk_bytes;
  for (const TensorSpec& t : mine) chunk_bytes.push_back(t.bytes);
  ENGRAM_ASSIGN_OR_RETURN(SharedChunks chunks, exchange_shareable_chunks(backend, group, chunk_bytes, exchange));
  for (size_t r = 0; r < lists.size(); ++r)
    ENGRAM_CHECK(chunks.chunk_count(static_cast<int>(r)) == static_cast<int>(lists[r].size()));
  if (!chunks.shared()) coverage_probe<"weight sharing: plain memory, peers' tensors unreadable">();
  return WeightSharing(backend, std::move(lists), std::move(chunks));
}

Result<int> WeightSharing::find(int owner, std::string_view name, const char* step) const {
  const int me_world = backend_->world_rank;
  if (owner < 0 || owner >= group_size())
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("weight sharing: group rank {} is outside [0, {})", owner, group_size()),
                  {me_world, -1, step});
  const std::vector<TensorSpec>& list = tensors_[static_cast<size_t>(owner)];
  const auto it = std::find_if(list.begin(), list.end(), [&](const TensorSpec& t) { return t.name == name; });
  if (it == list.end())
    return Status(ErrorCode::kNotFound,
                  fmt::format("weight sharing: rank {} shares no tensor '{}' ({} tensors)",
                              chunks_.world_rank_of(owner), name, list.size()),
                  {me_world, chunks_.world_rank_of(owner), step});
  if (!chunks_.shared() && owner != group_rank())
    return Status(ErrorCode::kFailedPrecondition,
                  fmt::format("weight sharing: rank {}'s tensor '{}' is not mapped here: the group shares plain "
                              "memory only ({})",
                              chunks_.world_rank_of(owner), name, chunks_.unshared_reason().message()),
                  {me_world, chunks_.world_rank_of(owner), step});
  return static_cast<int>(it - list.begin());
}

Result<DevicePtr> WeightSharing::address(int owner, std::string_view name) const {
  ENGRAM_ASSIGN_OR_RETURN(int index, find(owner, name, "address"));
  return chunks_.chunk(owner, index);
}

Status WeightSharing::write(std::string_view name, std::span<const std::byte> bytes) {
  ENGRAM_ASSIGN_OR_RETURN(int index, find(group_rank(), name, "write"));
  const TensorSpec& t = tensors_[static_cast<size_t>(group_rank())][static_cast<size_t>(index)];
  if (bytes.size() > t.bytes)
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("weight sharing: {} bytes do not fit tensor '{}' of {} bytes", bytes.size(), name,
                              t.bytes),
                  {backend_->world_rank, -1, "write"});
  return backend_->device->copy_to_device(chunks_.chunk(group_rank(), index), bytes);
}

Status WeightSharing::read(int owner, std::string_view name, std::span<std::byte> bytes) const {
  ENGRAM_ASSIGN_OR_RETURN(int index, find(owner, name, "read"));
  const TensorSpec& t = tensors_[static_cast<size_t>(owner)][static_cast<size_t>(index)];
  if (bytes.size() > t.bytes)
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("weight sharing: reading {} bytes of tensor '{}', which has {}", bytes.size(), name,
                              t.bytes),
                  {backend_->world_rank, chunks_.world_rank_of(owner), "read"});
  return backend_->device->copy_from_device(bytes, chunks_.chunk(owner, index));
}

}  // namespace engram
