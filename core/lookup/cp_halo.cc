#include "core/lookup/cp_halo.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace engram {
namespace {

constexpr int kFrameHeaderWords = 2;  // halo_length, shard length
constexpr const char* kStep = "cp_halo";

std::string world_rank_list(std::span<const int> ranks) {
  std::string text;
  for (int r : ranks) text += fmt::format("{}{}", text.empty() ? "" : ", ", r);
  return text;
}

// What a failed all-gather means to a CP rank: the halo it waits for did not
// come. A peer the backend names (dead: unavailable; late past the deadline:
// deadline_exceeded) is the CP rank that did not send.
Status halo_not_received(Status cause, std::span<const int> member_world_ranks, int world_rank) {
  if (cause.code() == ErrorCode::kInvalidArgument)  // frames of another size: another halo_length
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("cp_halo: the members' halos differ in length ({}); every member must pass the same "
                              "halo_length (cp_halo_length over the same tables)",
                              cause.message()),
                  {world_rank, cause.context().peer, kStep});
  if (cause.code() != ErrorCode::kUnavailable && cause.code() != ErrorCode::kDeadlineExceeded)
    return std::move(cause).with_context(world_rank, -1, kStep);
  const int peer = cause.context().peer;
  const auto it = std::find(member_world_ranks.begin(), member_world_ranks.end(), peer);
  if (it == member_world_ranks.end())
    return Status(ErrorCode::kDeadlineExceeded,
                  fmt::format("cp_halo: the halos of the CP group (world ranks {}) did not arrive: {}",
                              world_rank_list(member_world_ranks), cause.message()),
                  {world_rank, peer, kStep});
  const int cp_rank = static_cast<int>(it - member_world_ranks.begin());
  return Status(ErrorCode::kDeadlineExceeded,
                fmt::format("cp_halo: CP rank {} (world rank {}) did not send its halo{}: {}", cp_rank, peer,
                            peer == world_rank ? " in time (this rank: its peers gave up on it)" : "",
                            cause.message()),
                {world_rank, peer, kStep});
}

Status check_group(int group_size, int group_rank, std::span<const int> member_world_ranks, int world_rank,
                   int halo_length) {
  if (halo_length < 0)
    return invalid_argument(fmt::format("cp_halo: halo_length is {}; it is max order - 1, at least 0", halo_length));
  if (static_cast<int>(member_world_ranks.size()) != group_size || group_rank < 0 || group_rank >= group_size ||
      member_world_ranks[static_cast<size_t>(group_rank)] != world_rank)
    return invalid_argument(fmt::format(
        "cp_halo: the group has {} members and this rank (world rank {}) is member {}, but member_world_ranks is "
        "[{}]; pass the CP group's world ranks in CP rank order (cp_group_of)",
        group_size, world_rank, group_rank, world_rank_list(member_world_ranks)));
  return Status::ok();
}

}  // namespace

int cp_halo_frame_words(int halo_length) {
  ENGRAM_CHECK(halo_length >= 0);
  return kFrameHeaderWords + halo_length;
}

std::vector<int64_t> encode_cp_halo_frame(int halo_length, std::span<const int64_t> shard) {
  std::vector<int64_t> frame(static_cast<size_t>(cp_halo_frame_words(halo_length)), kDeadId);
  const size_t tail = std::min(shard.size(), static_cast<size_t>(halo_length));
  frame[0] = halo_length;
  frame[1] = static_cast<int64_t>(shard.size());
  std::copy(shard.end() - static_cast<std::ptrdiff_t>(tail), shard.end(), frame.begin() + kFrameHeaderWords);
  return frame;
}

int cp_halo_length(std::span<const TableHasher> hashers) {
  int length = 0;
  for (const TableHasher& h : hashers) length = std::max(length, h.history_length());
  return length;
}

Result<CpHalo> CpHalo::decode(std::span<const int64_t> gathered, int halo_length,
                              std::span<const int> member_world_ranks, int world_rank) {
  const size_t words = static_cast<size_t>(cp_halo_frame_words(halo_length));
  ENGRAM_CHECK(gathered.size() == words * member_world_ranks.size());
  CpHalo halo;
  halo.halo_length_ = halo_length;
  for (size_t k = 0; k < member_world_ranks.size(); ++k) {
    std::span<const int64_t> frame = gathered.subspan(k * words, words);
    const int peer = member_world_ranks[k];
    // Frames of one size carry one halo_length; a frame that says otherwise is corrupt.
    if (frame[0] != halo_length || frame[1] < 0)
      return Status(ErrorCode::kInternal,
                    fmt::format("cp_halo: CP rank {} (world rank {}) sent a malformed halo (halo length {}, shard "
                                "length {}; this rank's halo length is {})",
                                k, peer, frame[0], frame[1], halo_length),
                    {world_rank, peer, kStep});
    const size_t tail = static_cast<size_t>(std::min<int64_t>(frame[1], halo_length));
    halo.shard_tokens_.push_back(frame[1]);
    halo.tails_.emplace_back(frame.begin() + kFrameHeaderWords,
                             frame.begin() + kFrameHeaderWords + static_cast<std::ptrdiff_t>(tail));
  }
  return halo;
}

int64_t CpHalo::shard_tokens(int cp_rank) const {
  ENGRAM_CHECK(cp_rank >= 0 && cp_rank < member_count());
  return shard_tokens_[static_cast<size_t>(cp_rank)];
}

int64_t CpHalo::shard_offset(int cp_rank) const {
  ENGRAM_CHECK(cp_rank >= 0 && cp_rank <= member_count());
  int64_t offset = 0;
  for (int k = 0; k < cp_rank; ++k) offset += shard_tokens_[static_cast<size_t>(k)];
  return offset;
}

int64_t CpHalo::chunk_tokens() const { return shard_offset(member_count()); }

std::vector<int64_t> CpHalo::lookback_before(int cp_rank, std::span<const int64_t> preceding_ids) const {
  ENGRAM_CHECK(cp_rank >= 0 && cp_rank <= member_count());
  // The last L ids of a concatenation come from the last L ids of its parts,
  // so each earlier shard's tail (at most L ids) is all that is needed, and a
  // shard shorter than L lets the lookback reach into the ones before it.
  const size_t length = static_cast<size_t>(halo_length_);
  std::vector<int64_t> ids(preceding_ids.end() - static_cast<std::ptrdiff_t>(std::min(preceding_ids.size(), length)),
                           preceding_ids.end());
  for (int k = 0; k < cp_rank; ++k) {
    const std::vector<int64_t>& tail = tails_[static_cast<size_t>(k)];
    ids.insert(ids.end(), tail.begin(), tail.end());
  }
  if (ids.size() > length) ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(length));
  return ids;
}

std::vector<int64_t> CpHalo::lookback_after_chunk(std::span<const int64_t> preceding_ids) const {
  return lookback_before(member_count(), preceding_ids);
}

Result<CpHalo> exchange_cp_halo(Collectives& group, std::span<const int> member_world_ranks, int halo_length,
                                std::span<const int64_t> shard) {
  const int world_rank = group.world_rank();
  ENGRAM_RETURN_IF_ERROR(check_group(group.size(), group.rank(), member_world_ranks, world_rank, halo_length));
  const std::vector<int64_t> mine = encode_cp_halo_frame(halo_length, shard);
  std::vector<int64_t> gathered(mine.size() * member_world_ranks.size());
  Status sent = group.all_gather(std::as_bytes(std::span<const int64_t>(mine)),
                                 std::as_writable_bytes(std::span<int64_t>(gathered)));
  if (!sent.is_ok()) return halo_not_received(std::move(sent), member_world_ranks, world_rank);
  return CpHalo::decode(gathered, halo_length, member_world_ranks, world_rank);
}

Result<DeviceCpHaloExchange> DeviceCpHaloExchange::create(DeviceCompute& compute, DeviceCollectives& group,
                                                          std::vector<int> member_world_ranks, int world_rank,
                                                          int halo_length) {
  ENGRAM_RETURN_IF_ERROR(check_group(group.size(), group.rank(), member_world_ranks, world_rank, halo_length));
  DeviceCpHaloExchange x;
  x.compute_ = &compute;
  x.group_ = &group;
  x.member_world_ranks_ = std::move(member_world_ranks);
  x.world_rank_ = world_rank;
  x.halo_length_ = halo_length;
  const uint64_t frame_bytes = static_cast<uint64_t>(cp_halo_frame_words(halo_length)) * sizeof(int64_t);
  ENGRAM_ASSIGN_OR_RETURN(x.mine_, compute.allocate(frame_bytes));
  // x's destructor frees mine_ if this fails.
  ENGRAM_ASSIGN_OR_RETURN(x.gathered_, compute.allocate(frame_bytes * x.member_world_ranks_.size()));
  return x;
}

DeviceCpHaloExchange::DeviceCpHaloExchange(DeviceCpHaloExchange&& other) noexcept
    : compute_(std::exchange(other.compute_, nullptr)),
      group_(std::exchange(other.group_, nullptr)),
      member_world_ranks_(std::move(other.member_world_ranks_)),
      world_rank_(other.world_rank_),
      halo_length_(other.halo_length_),
      mine_(std::exchange(other.mine_, 0)),
      gathered_(std::exchange(other.gathered_, 0)) {}

DeviceCpHaloExchange::~DeviceCpHaloExchange() { close().ignore(); }

Status DeviceCpHaloExchange::close() {
  Status first = Status::ok();
  for (DevicePtr* p : {&mine_, &gathered_}) {
    if (*p == 0) continue;
    Status freed = compute_->free(std::exchange(*p, 0));
    if (first.is_ok() && !freed.is_ok()) first = std::move(freed);
  }
  return first;
}

Result<CpHalo> DeviceCpHaloExchange::exchange(std::span<const int64_t> shard, StreamRef stream) {
  ENGRAM_CHECK_MSG(mine_ != 0 && gathered_ != 0, "DeviceCpHaloExchange::exchange after close()");
  const std::vector<int64_t> mine = encode_cp_halo_frame(halo_length_, shard);
  ENGRAM_RETURN_IF_ERROR(compute_->copy_to_device(mine_, std::as_bytes(std::span<const int64_t>(mine))));
  Status sent = group_->all_gather(mine_, gathered_, mine.size() * sizeof(int64_t), stream);
  if (sent.is_ok()) sent = compute_->synchronize(stream);
  if (!sent.is_ok()) return halo_not_received(std::move(sent), member_world_ranks_, world_rank_);
  std::vector<int64_t> gathered(mine.size() * member_world_ranks_.size());
  ENGRAM_RETURN_IF_ERROR(compute_->copy_to_host(std::as_writable_bytes(std::span<int64_t>(gathered)), gathered_));
  return CpHalo::decode(gathered, halo_length_, member_world_ranks_, world_rank_);
}

Status hash_cp_shard(const CpHalo& halo, int cp_rank, const TableHasher& hasher,
                     std::span<const int64_t> preceding_ids, std::span<const int64_t> shard,
                     std::span<int64_t> row_ids) {
  if (cp_rank < 0 || cp_rank >= halo.member_count())
    return invalid_argument(fmt::format("cp_halo: cp_rank is {}; the group has {} members", cp_rank,
                                        halo.member_count()));
  if (static_cast<int64_t>(shard.size()) != halo.shard_tokens(cp_rank))
    return invalid_argument(fmt::format("cp_halo: CP rank {} hashes a shard of {} tokens but exchanged one of {}; "
                                        "hash the shard whose halo was traded",
                                        cp_rank, shard.size(), halo.shard_tokens(cp_rank)));
  if (hasher.history_length() > halo.halo_length())
    return invalid_argument(fmt::format("cp_halo: the table reads {} ids back but the halos hold {}; exchange "
                                        "halos of cp_halo_length() over every table",
                                        hasher.history_length(), halo.halo_length()));
  const size_t heads = static_cast<size_t>(hasher.head_count());
  if (row_ids.size() != shard.size() * heads)
    return invalid_argument(fmt::format("cp_halo: row_ids holds {} ids; {} tokens x {} heads need {}",
                                        row_ids.size(), shard.size(), heads, shard.size() * heads));
  for (size_t i = 0; i < preceding_ids.size(); ++i)
    ENGRAM_RETURN_IF_ERROR(hasher.check_token(preceding_ids[i], fmt::format("cp_halo: preceding_ids[{}]", i)));
  for (size_t t = 0; t < shard.size(); ++t)
    ENGRAM_RETURN_IF_ERROR(hasher.check_token(shard[t], fmt::format("cp_halo: CP rank {} shard[{}]", cp_rank, t)));
  const std::vector<int64_t> lookback = halo.lookback_before(cp_rank, preceding_ids);
  // Halo ids came from peers: checked as the shard is, so a bad id is named.
  for (size_t i = 0; i < lookback.size(); ++i)
    ENGRAM_RETURN_IF_ERROR(hasher.check_token(lookback[i], fmt::format("cp_halo: the halo before CP rank {}, id {}",
                                                                        cp_rank, i)));
  std::vector<int64_t> history = hasher.empty_history();
  hasher.advance(history, lookback);
  hasher.hash_run(history, shard, row_ids);
  return Status::ok();
}

}  // namespace engram
