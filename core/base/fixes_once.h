// A report's fixes said once: where several lines of one report end in the
// same long advice (doctor judging every placement, each "put fewer ranks
// on each host, give the host's real RAM ..."), the first says it in full,
// numbered, and the others point back to it.
#pragma once

#include <string>
#include <vector>

namespace engram {

// Clauses ("; "-separated) of at least `min_chars` characters that appear in
// two or more of `lines`: the first occurrence becomes "[fix N] CLAUSE", a
// later one "(fix N above)", and a run of such references one "(fixes N-M
// above)". Lines without a repeated clause are unchanged.
std::vector<std::string> say_fixes_once(const std::vector<std::string>& lines, size_t min_chars = 60);
// The same over the lines of one text (an error of several lines: each
// unknown field of a file names the known ones).
std::string say_fixes_once_in(const std::string& text, size_t min_chars = 60);

}  // namespace engram
