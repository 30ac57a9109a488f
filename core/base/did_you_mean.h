// "Did you mean": the closest of the names a place accepts to a name it was
// given, for unknown flags and unknown YAML fields alike. Case, and '_'
// against '-', do not count (torchrun writes --nproc_per_node, YAML fields
// are snake_case, flags kebab-case); each insertion, deletion, substitution
// or swap of two neighbours counts one.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace engram {

// Edits between `a` and `b` (optimal string alignment distance), after both
// are lowercased and '_' read as '-'.
size_t name_distance(std::string_view a, std::string_view b);

// The candidates closest to `word`, in the order given, when close enough to
// be a slip (one edit, or a third of the longer name's characters); none
// when nothing is. Dashes count like any character: compare bare names
// (tp-size, not --tp-size).
std::vector<std::string> closest_names(std::string_view word, std::span<const std::string> candidates);

// "did you mean 'tp'?" / "did you mean 'tp' or 'dp'?", empty when nothing is
// close; `quote` false writes the names bare (--tp-size).
std::string did_you_mean(std::string_view word, std::span<const std::string> candidates, bool quote = true);

}  // namespace engram
