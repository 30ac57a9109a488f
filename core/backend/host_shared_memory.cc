#include "core/backend/host_shared_memory.h"

namespace engram {
namespace {

// Consumes `word` then at least one digit from the front of `rest`.
bool take_numbered(std::string_view& rest, std::string_view word) {
  if (rest.substr(0, word.size()) != word) return false;
  size_t digits = 0;
  while (word.size() + digits < rest.size() && rest[word.size() + digits] >= '0' && rest[word.size() + digits] <= '9')
    ++digits;
  if (digits == 0) return false;
  rest.remove_prefix(word.size() + digits);
  return true;
}

}  // namespace

bool is_shm_name_part(std::string_view part) {
  return part.size() == kShmNamePartChars && part.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::string shm_segment_prefix(const std::string& job_id, std::string_view name_part) {
  ENGRAM_CHECK(is_shm_name_part(name_part));
  return "engramlab-" + job_id + "-" + std::string(name_part) + "-";
}

bool is_job_segment_name(std::string_view name, std::string_view job_id) {
  const std::string prefix = "engramlab-" + std::string(job_id) + "-";
  if (job_id.empty() || name.substr(0, prefix.size()) != prefix) return false;
  std::string_view rest = name.substr(prefix.size());
  if (rest.size() <= kShmNamePartChars || !is_shm_name_part(rest.substr(0, kShmNamePartChars)) ||
      rest[kShmNamePartChars] != '-')
    return false;
  rest.remove_prefix(kShmNamePartChars + 1);
  if (!take_numbered(rest, "layer")) return false;
  return rest.empty() || (take_numbered(rest, "-tp") && rest.empty());
}

}  // namespace engram
