#include "core/exchange/gather_facts.h"

#include <algorithm>
#include <cstdint>
#include <limits>

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

}  // namespace

Result<GatheredFacts> gather_facts(Collectives& group, const PlacementFacts& mine, std::span<const std::byte> extra) {
  const size_t n = static_cast<size_t>(group.size());
  const std::vector<std::byte> record = encode(mine, extra);
  std::vector<std::byte> fixed(kFactsRecordBytes);
  std::memcpy(fixed.data(), record.data(), std::min(record.size(), kFactsRecordBytes));
  std::vector<std::byte> all(kFactsRecordBytes * n);
  ENGRAM_RETURN_IF_ERROR(group.all_gather(fixed, all));
  size_t longest = 0;
  for (size_t r = 0; r < n; ++r) {
    RecordHeader h;
    std::memcpy(&h, all.data() + r * kFactsRecordBytes, sizeof h);
    longest = std::max(longest, record_bytes(h));
  }
  GatheredFacts out;
  size_t stride = kFactsRecordBytes;
  if (longest > kFactsRecordBytes) {
    out.took_second_round = true;
    stride = longest;
    std::vector<std::byte> padded(stride);
    std::memcpy(padded.data(), record.data(), record.size());
    all.assign(stride * n, std::byte{0});
    ENGRAM_RETURN_IF_ERROR(group.all_gather(padded, all));
  }
  out.ranks.reserve(n);
  for (size_t r = 0; r < n; ++r) {
    const std::span<const std::byte> slot = std::span<const std::byte>(all).subspan(r * stride, stride);
    out.ranks.push_back(decode(slot));
    RecordHeader h;
    std::memcpy(&h, slot.data(), sizeof h);
    out.key_bytes.append(reinterpret_cast<const char*>(slot.data()), record_bytes(h));
  }
  return out;
}

}  // namespace engram
