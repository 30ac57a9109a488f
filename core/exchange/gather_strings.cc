#include "core/exchange/gather_strings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace engram {

Result<std::vector<std::string>> all_gather_strings(Collectives& group, std::string_view mine) {
  const size_t members = static_cast<size_t>(group.size());
  const uint64_t my_length = mine.size();
  std::vector<uint64_t> lengths(members);
  ENGRAM_RETURN_IF_ERROR(group.all_gather(std::as_bytes(std::span<const uint64_t>(&my_length, 1)),
                                          std::as_writable_bytes(std::span<uint64_t>(lengths))));
  const uint64_t longest = *std::max_element(lengths.begin(), lengths.end());
  // Decided from the gathered lengths, so every member refuses alike
  // instead of one leaving the others in the next round.
  if (longest > kGatheredTextBytesMax) {
    const size_t who = static_cast<size_t>(std::max_element(lengths.begin(), lengths.end()) - lengths.begin());
    return invalid_argument(fmt::format("gathered text: member {} sent {} bytes, more than the {} a member may",
                                        who, longest, kGatheredTextBytesMax));
  }
  std::vector<std::byte> padded(static_cast<size_t>(longest));
  std::memcpy(padded.data(), mine.data(), mine.size());
  std::vector<std::byte> all(padded.size() * members);
  if (longest > 0) ENGRAM_RETURN_IF_ERROR(group.all_gather(padded, all));
  std::vector<std::string> out(members);
  for (size_t m = 0; m < members; ++m)
    out[m].assign(reinterpret_cast<const char*>(all.data()) + m * longest, static_cast<size_t>(lengths[m]));
  return out;
}

}  // namespace engram
