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

// What one gathered buffer comes to: the longest record in it and, when
// every record fit, the decoded facts. Kept with the buffer
// (GatheredBytes::derived), so ranks handed the same shared buffer (the
// emulator's) scan and decode it once: a group of N costs O(N), not O(N^2).
struct Decoded {
  size_t stride = 0;  // as the first reader read it; every reader must agree
  size_t longest = 0;
  std::shared_ptr<const GatheredFacts> facts;  // null for a first round that needs a second
};

// `all` holds n records of `stride` bytes.
std::shared_ptr<const Decoded> decode_once(const GatheredBytes& all, size_t n, size_t stride, bool second_round) {
  auto decoded = all.derived.get_or_make<const Decoded>([&] {
    auto d = std::make_shared<Decoded>();
    d->stride = stride;
    for (size_t r = 0; r < n; ++r) {
      RecordHeader h;
      std::memcpy(&h, all.bytes.data() + r * stride, sizeof h);
      d->longest = std::max(d->longest, record_bytes(h));
    }
    if (d->longest <= stride) {
      auto facts = std::make_shared<GatheredFacts>();
      facts->took_second_round = second_round;
      facts->ranks.reserve(n);
      for (size_t r = 0; r < n; ++r)
        facts->ranks.push_back(decode(std::span<const std::byte>(all.bytes).subspan(r * stride, stride)));
      d->facts = std::move(facts);
    }
    return std::shared_ptr<const Decoded>(std::move(d));
  });
  ENGRAM_CHECK(decoded->stride == stride && all.bytes.size() == n * stride);
  return decoded;
}

}  // namespace

Result<std::shared_ptr<const GatheredFacts>> gather_facts(Collectives& group, const PlacementFacts& mine,
                                                          std::span<const std::byte> extra) {
  const size_t n = static_cast<size_t>(group.size());
  const std::vector<std::byte> record = encode(mine, extra);
  std::vector<std::byte> fixed(kFactsRecordBytes);
  std::memcpy(fixed.data(), record.data(), std::min(record.size(), kFactsRecordBytes));
  ENGRAM_ASSIGN_OR_RETURN(std::shared_ptr<const GatheredBytes> all, group.all_gather_shared(fixed));
  ENGRAM_CHECK(all->bytes.size() == kFactsRecordBytes * n);
  const std::shared_ptr<const Decoded> first = decode_once(*all, n, kFactsRecordBytes, false);
  if (first->facts) return first->facts;
  // Some record was longer: a second round padded to the longest, which
  // every rank knows from the first round's headers.
  const size_t longest = first->longest;
  ENGRAM_CHECK(longest > kFactsRecordBytes && record.size() <= longest);
  std::vector<std::byte> padded(longest);
  std::memcpy(padded.data(), record.data(), record.size());
  ENGRAM_ASSIGN_OR_RETURN(all, group.all_gather_shared(padded));
  ENGRAM_CHECK(all->bytes.size() == longest * n);
  const std::shared_ptr<const Decoded> second = decode_once(*all, n, longest, true);
  ENGRAM_CHECK(second->facts != nullptr);
  return second->facts;
}

}  // namespace engram
