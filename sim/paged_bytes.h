// The contents of one emulated device allocation: paged lazily (a page
// exists once written; the rest reads as zeros), with shared extents beside
// the pages: ranges starting on a page that read from an immutable buffer many
// allocations hold at once (an all-gather's output is the same bytes on
// every member of the group; every replica of a shard fills the same rows).
// An extent costs one entry however long it is, so N members holding a
// group-sized all-gather cost N entries, not N x group pages. A write into
// an extent first copies the pages it touches out of it.
#pragma once

#include <boost/container/flat_map.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace engram::sim {

// What a rank touches is what it costs: small, since most emulated writes
// are a few rows or a shard table of a few hundred bytes (a 4 KiB page per
// such write was a sixth of a 9,216-rank start's memory).
inline constexpr uint64_t kSimPageBytes = 1024;

using SharedBytes = std::shared_ptr<const std::vector<std::byte>>;

// Bytes [offset, offset + length) of an allocation that lie inside one
// extent: they are data[data_offset, data_offset + length).
struct SharedView {
  SharedBytes data;
  uint64_t data_offset = 0;
};

class PagedBytes {
 public:
  // Offsets are within the allocation; the caller keeps them inside it.
  void read(uint64_t offset, std::span<std::byte> out) const;
  void write(uint64_t offset, std::span<const std::byte> bytes);
  // Zeros over [offset, offset + length): whole pages and extent parts are
  // dropped, so zeroing a wide, mostly unwritten range costs what it held.
  void zero(uint64_t offset, uint64_t length);
  // data[data_offset, data_offset + length) at offset: from the range's first
  // page boundary on, an extent of `data` (its ragged last page too, when
  // the rest of that page reads as zeros); the rest is copied.
  void share(uint64_t offset, const SharedBytes& data, uint64_t data_offset, uint64_t length);
  // The range, when it lies inside one extent.
  std::optional<SharedView> shared_view(uint64_t offset, uint64_t length) const;
  // fn(offset, bytes) for each written part of [offset, offset + length) (a
  // page or an extent, clipped to the range), in offset order; the rest of
  // the range reads as zeros. O(parts held), not O(length).
  void for_each_written(uint64_t offset, uint64_t length,
                        const std::function<void(uint64_t offset, std::span<const std::byte> bytes)>& fn) const;

  uint64_t page_count() const { return pages_.size(); }
  uint64_t extent_count() const { return extents_.size(); }

 private:
  struct Extent {
    // One past its last byte in the allocation. [key, end) starts on a page;
    // where end does not fall on one, the rest of its page reads as zeros
    // and holds no page.
    uint64_t end = 0;
    SharedBytes data;
    uint64_t data_offset = 0;  // where the extent's first byte sits in data
  };
  using Extents = boost::container::flat_map<uint64_t, Extent>;

  // The extent holding byte `offset`, or end().
  Extents::const_iterator extent_at(uint64_t offset) const;
  // Page `page`, ready to write: copied out of an extent that holds it (the
  // extent loses the page), else allocated zeroed if absent.
  std::byte* writable_page(uint64_t page);
  // Removes [first_page, last_page) from every extent, keeping the rest of
  // each (an extent cut in the middle becomes two).
  void cut_extents(uint64_t first_page, uint64_t last_page);
  // Page indices of pages_ in [first, last), in order.
  std::vector<uint64_t> pages_in(uint64_t first, uint64_t last) const;

  std::unordered_map<uint64_t, std::unique_ptr<std::byte[]>> pages_;  // page index -> kSimPageBytes
  Extents extents_;  // by first byte; disjoint from each other and from pages_
};

}  // namespace engram::sim
