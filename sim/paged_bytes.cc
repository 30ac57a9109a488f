#include "sim/paged_bytes.h"

#include <algorithm>
#include <cstring>

#include "core/base/status.h"

namespace engram::sim {
namespace {

constexpr uint64_t kPage = kSimPageBytes;

uint64_t pages_up(uint64_t bytes) { return (bytes + kPage - 1) / kPage; }

}  // namespace

PagedBytes::Extents::const_iterator PagedBytes::extent_at(uint64_t offset) const {
  auto it = extents_.upper_bound(offset);
  if (it == extents_.begin()) return extents_.end();
  --it;
  return offset < it->second.end ? it : extents_.end();
}

std::vector<uint64_t> PagedBytes::pages_in(uint64_t first, uint64_t last) const {
  // From the map when it holds fewer pages than the range spans, so a wide
  // range over few written pages costs the pages, not the range.
  std::vector<uint64_t> out;
  if (last <= first) return out;
  if (last - first > pages_.size()) {
    for (const auto& [index, backing] : pages_)
      if (index >= first && index < last) out.push_back(index);
    std::sort(out.begin(), out.end());
  } else {
    for (uint64_t index = first; index < last; ++index)
      if (pages_.count(index) != 0) out.push_back(index);
  }
  return out;
}

void PagedBytes::cut_extents(uint64_t first_page, uint64_t last_page) {
  if (extents_.empty() || first_page >= last_page) return;
  const uint64_t from = first_page * kPage, to = last_page * kPage;
  std::vector<std::pair<uint64_t, Extent>> kept;  // the parts outside [from, to)
  auto it = extents_.upper_bound(from);
  if (it != extents_.begin()) --it;
  while (it != extents_.end() && it->first < to) {
    if (it->second.end <= from) {
      ++it;
      continue;
    }
    const uint64_t begin = it->first;
    Extent cut = std::move(it->second);
    it = extents_.erase(it);
    if (begin < from) kept.push_back({begin, Extent{from, cut.data, cut.data_offset}});
    if (cut.end > to) kept.push_back({to, Extent{cut.end, cut.data, cut.data_offset + (to - begin)}});
  }
  for (auto& [begin, extent] : kept) extents_.emplace(begin, std::move(extent));
}

std::byte* PagedBytes::writable_page(uint64_t page) {
  auto& backing = pages_[page];
  if (backing) return backing.get();
  backing = std::make_unique<std::byte[]>(kPage);  // zeroed
  if (auto e = extent_at(page * kPage); e != extents_.end()) {
    // The page leaves the extent, carrying its bytes (all of it, or the
    // extent's ragged end and zeros after).
    const uint64_t held = std::min(kPage, e->second.end - page * kPage);
    std::memcpy(backing.get(), e->second.data->data() + e->second.data_offset + (page * kPage - e->first), held);
    cut_extents(page, page + 1);
  }
  return backing.get();
}

void PagedBytes::read(uint64_t offset, std::span<std::byte> out) const {
  uint64_t done = 0;
  while (done < out.size()) {
    const uint64_t at = offset + done;
    uint64_t n = out.size() - done;
    if (auto e = extent_at(at); e != extents_.end()) {
      n = std::min(n, e->second.end - at);
      std::memcpy(out.data() + done, e->second.data->data() + e->second.data_offset + (at - e->first), n);
    } else {
      // Within one page, which no extent holds from here on (an extent
      // starts on a page, and what follows its ragged end reads as zeros).
      n = std::min(n, kPage - at % kPage);
      auto it = pages_.find(at / kPage);
      // Never-written memory reads as zeros here (garbage on hardware).
      if (it == pages_.end()) std::memset(out.data() + done, 0, n);
      else std::memcpy(out.data() + done, it->second.get() + at % kPage, n);
    }
    done += n;
  }
}

void PagedBytes::write(uint64_t offset, std::span<const std::byte> bytes) {
  if (bytes.empty()) return;
  // Whole pages written need no copy out of an extent: cut them first.
  cut_extents(pages_up(offset), (offset + bytes.size()) / kPage);
  uint64_t done = 0;
  while (done < bytes.size()) {
    const uint64_t at = offset + done;
    const uint64_t n = std::min<uint64_t>(bytes.size() - done, kPage - at % kPage);
    std::memcpy(writable_page(at / kPage) + at % kPage, bytes.data() + done, n);
    done += n;
  }
}

void PagedBytes::zero(uint64_t offset, uint64_t length) {
  if (length == 0) return;
  const uint64_t end = offset + length;
  const uint64_t first = offset / kPage, last = pages_up(end);
  const uint64_t whole_first = pages_up(offset), whole_last = end / kPage;
  if (whole_first < whole_last) {
    cut_extents(whole_first, whole_last);
    for (uint64_t page : pages_in(whole_first, whole_last)) pages_.erase(page);
  }
  // A partly covered page is cleared in place, if it holds anything.
  auto clear_part = [&](uint64_t page) {
    if (pages_.count(page) == 0 && extent_at(page * kPage) == extents_.end()) return;
    const uint64_t from = std::max(offset, page * kPage), to = std::min(end, (page + 1) * kPage);
    std::memset(writable_page(page) + (from - page * kPage), 0, to - from);
  };
  const bool head_partial = first < whole_first;
  if (head_partial) clear_part(first);
  if (whole_last < last && !(head_partial && last - 1 == first)) clear_part(last - 1);
}

void PagedBytes::share(uint64_t offset, const SharedBytes& data, uint64_t data_offset, uint64_t length) {
  ENGRAM_CHECK(data != nullptr && data_offset + length <= data->size());
  const uint64_t end = offset + length;
  const std::byte* source = data->data() + data_offset;
  const uint64_t from = pages_up(offset) * kPage;  // the extent starts on a page
  uint64_t extent_end = end / kPage * kPage;
  if (end % kPage != 0 && from < end) {
    // The ragged last page joins the extent when the rest of it reads as
    // zeros (no page, and what an extent holds of it ends by `end`): the
    // all-gather's group-sized output is rarely a whole number of pages, and
    // a lookup rewrites the same buffer with the same shape each step.
    const uint64_t last = end / kPage;
    const auto e = extent_at(last * kPage);
    if (pages_.count(last) == 0 && (e == extents_.end() || e->second.end <= end)) extent_end = end;
  }
  if (extent_end <= from) {
    write(offset, std::span(source, length));
    return;
  }
  if (offset < from) write(offset, std::span(source, from - offset));
  if (extent_end < end) write(extent_end, std::span(source + (extent_end - offset), end - extent_end));
  cut_extents(from / kPage, pages_up(extent_end));
  for (uint64_t page : pages_in(from / kPage, pages_up(extent_end))) pages_.erase(page);
  extents_.emplace(from, Extent{extent_end, data, data_offset + (from - offset)});
}

std::optional<SharedView> PagedBytes::shared_view(uint64_t offset, uint64_t length) const {
  if (length == 0) return std::nullopt;
  auto e = extent_at(offset);
  if (e == extents_.end() || offset + length > e->second.end) return std::nullopt;
  return SharedView{e->second.data, e->second.data_offset + (offset - e->first)};
}

void PagedBytes::for_each_written(uint64_t offset, uint64_t length,
                                  const std::function<void(uint64_t, std::span<const std::byte>)>& fn) const {
  if (length == 0) return;
  const uint64_t end = offset + length;
  struct Part {
    uint64_t at;
    const std::byte* bytes;
    uint64_t length;
  };
  std::vector<Part> parts;
  for (uint64_t page : pages_in(offset / kPage, pages_up(end))) {
    const uint64_t from = std::max(offset, page * kPage), to = std::min(end, (page + 1) * kPage);
    parts.push_back({from, pages_.at(page).get() + (from - page * kPage), to - from});
  }
  auto it = extents_.upper_bound(offset);
  if (it != extents_.begin()) --it;
  for (; it != extents_.end() && it->first < end; ++it) {
    if (it->second.end <= offset) continue;
    const uint64_t from = std::max(offset, it->first), to = std::min(end, it->second.end);
    parts.push_back({from, it->second.data->data() + it->second.data_offset + (from - it->first), to - from});
  }
  std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.at < b.at; });
  for (const Part& part : parts) fn(part.at, std::span(part.bytes, part.length));
}

}  // namespace engram::sim
