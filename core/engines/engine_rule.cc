#include "core/engines/engine_rule.h"

#include <fmt/format.h>

namespace engram {

const char* source_state_name(SourceState state) {
  switch (state) {
    case SourceState::kMerged: return "merged";
    case SourceState::kOpen: return "open";
    case SourceState::kFork: return "fork";
    case SourceState::kStoredReading: return "stored reading";
    case SourceState::kEngramlab: return "engramlab";
  }
  return "?";
}

std::string rule_source_text(const RuleSource& source) {
  std::string ref = source.ref[0] == '\0' ? std::string() : fmt::format(" @ {}", source.ref);
  // A 40-digit commit reads as its first 8.
  if (ref.size() == 3 + 40 && ref.find_first_not_of("0123456789abcdef", 3) == std::string::npos) ref.resize(3 + 8);
  const char* caveat = source.state == SourceState::kStoredReading
                           ? "; docs/design.md section 9's stored reading, commit not found by the search tools"
                           : "";
  return fmt::format("{} {}{} ({}{})", source.repo, source.path, ref, source_state_name(source.state), caveat);
}

bool rule_source_complete(const RuleSource& source) {
  if (source.repo == nullptr || source.path == nullptr || source.ref == nullptr) return false;
  if (source.repo[0] == '\0' || source.path[0] == '\0') return false;
  return source.state == SourceState::kStoredReading || source.state == SourceState::kFork || source.ref[0] != '\0';
}

}  // namespace engram
