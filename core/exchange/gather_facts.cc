#include "core/exchange/gather_facts.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <unordered_map>

namespace engram {
namespace {

// Fixed head of a record; the caller's part, then hostname, boot id and
// NVLink domain follow it.
struct RecordHeader {
  int32_t gpu_ordinal = -1;
  int32_t visible_gpu_count = 0;
  uint32_t hostname_length = 0;
  uint32_t boot_id_length = 0;
  uint32_t domain_length = 0;
  uint16_t extra_length = 0;
  uint8_t imex_channel = 0;
  uint8_t pad = 0;
};
static_assert(sizeof(RecordHeader) == 24);

size_t record_bytes(const RecordHeader& h) {
  return sizeof(RecordHeader) + h.extra_length + h.hostname_length + h.boot_id_length + h.domain_length;
}

std::vector<std::byte> encode(const PlacementFacts& p, std::span<const std::byte> extra) {
  ENGRAM_CHECK(extra.size() <= std::numeric_limits<uint16_t>::max());
  RecordHeader h;
  h.gpu_ordinal = p.gpu_ordinal;
  h.visible_gpu_count = p.visible_gpu_count;
  h.imex_channel = p.imex_channel ? 1 : 0;
  h.extra_length = static_cast<uint16_t>(extra.size());
  h.hostname_length = static_cast<uint32_t>(p.host.hostname.size());
  h.boot_id_length = static_cast<uint32_t>(p.host.boot_id.size());
  h.domain_length = static_cast<uint32_t>(p.nvlink_domain.size());
  std::vector<std::byte> out(record_bytes(h));
  std::memcpy(out.data(), &h, sizeof h);
  size_t at = sizeof h;
  if (!extra.empty()) std::memcpy(out.data() + at, extra.data(), extra.size());
  at += extra.size();
  for (const std::string* s : {&p.host.hostname, &p.host.boot_id, &p.nvlink_domain}) {
    if (!s->empty()) std::memcpy(out.data() + at, s->data(), s->size());
    at += s->size();
  }
  return out;
}

RankFacts decode(std::span<const std::byte> record) {
  ENGRAM_CHECK(record.size() >= sizeof(RecordHeader));
  RecordHeader h;
  std::memcpy(&h, record.data(), sizeof h);
  ENGRAM_CHECK(record_bytes(h) <= record.size());
  RankFacts f;
  const std::byte* at = record.data() + sizeof h;
  f.extra.assign(at, at + h.extra_length);
  const char* text = reinterpret_cast<const char*>(at + h.extra_length);
  f.placement.host.hostname.assign(text, h.hostname_length);
  f.placement.host.boot_id.assign(text + h.hostname_length, h.boot_id_length);
  f.placement.nvlink_domain.assign(text + h.hostname_length + h.boot_id_length, h.domain_length);
  f.placement.imex_channel = h.imex_channel != 0;
  f.placement.gpu_ordinal = h.gpu_ordinal;
  f.placement.visible_gpu_count = h.visible_gpu_count;
  return f;
}

// Decodes `all` (records of `stride` bytes) once per buffer: ranks of one
// process handed the same shared buffer get the same decoded facts.
std::shared_ptr<const GatheredFacts> decode_once(std::shared_ptr<const std::vector<std::byte>> all, size_t n,
                                                 size_t stride, bool second_round) {
  static std::mutex mutex;
  static std::unordered_map<const void*, std::weak_ptr<const GatheredFacts>> decoded;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = decoded[all.get()];
  if (auto facts = slot.lock(); facts && facts->source == all) return facts;
  auto facts = std::make_shared<GatheredFacts>();
  facts->took_second_round = second_round;
  facts->ranks.reserve(n);
  for (size_t r = 0; r < n; ++r) facts->ranks.push_back(decode(std::span<const std::byte>(*all).subspan(r * stride, stride)));
  facts->source = std::move(all);
  slot = facts;
  if (decoded.size() > 64) std::erase_if(decoded, [](const auto& entry) { return entry.second.expired(); });
  return facts;
}

}  // namespace

Result<std::shared_ptr<const GatheredFacts>> gather_facts(Collectives& group, const PlacementFacts& mine,
                                                          std::span<const std::byte> extra) {
  const size_t n = static_cast<size_t>(group.size());
  const std::vector<std::byte> record = encode(mine, extra);
  std::vector<std::byte> fixed(kFactsRecordBytes);
  std::memcpy(fixed.data(), record.data(), std::min(record.size(), kFactsRecordBytes));
  ENGRAM_ASSIGN_OR_RETURN(std::shared_ptr<const std::vector<std::byte>> all, group.all_gather_shared(fixed));
  ENGRAM_CHECK(all->size() == kFactsRecordBytes * n);
  size_t longest = 0;
  for (size_t r = 0; r < n; ++r) {
    RecordHeader h;
    std::memcpy(&h, all->data() + r * kFactsRecordBytes, sizeof h);
    longest = std::max(longest, record_bytes(h));
  }
  if (longest <= kFactsRecordBytes) return decode_once(std::move(all), n, kFactsRecordBytes, false);
  std::vector<std::byte> padded(longest);
  std::memcpy(padded.data(), record.data(), record.size());
  ENGRAM_ASSIGN_OR_RETURN(all, group.all_gather_shared(padded));
  ENGRAM_CHECK(all->size() == longest * n);
  return decode_once(std::move(all), n, longest, true);
}

}  // namespace engram
