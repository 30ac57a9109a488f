// Colour for the reports people read on a terminal: verdicts green or red,
// low headroom and warning keys yellow. Off where the output is not a
// terminal, with NO_COLOR set (no-color.org) or TERM=dumb, so pipes, files
// and tests see plain text; colour is added after a table is laid out, so
// its escapes never shift a column.
#pragma once

#include <string>
#include <string_view>

namespace engram {

// Whether to colour what goes to `fd`: a terminal, NO_COLOR unset or empty,
// TERM not "dumb".
bool colour_wanted(int fd);

// `report` with its verdict words coloured: "fits" on a verdict line and
// "(ok)" green; "cannot run", "refused", "(over)" and "error:" red; "(low)"
// and warning keys ("  [memory.headroom_low]") yellow. Text otherwise
// unchanged.
std::string colour_report(std::string_view report);

}  // namespace engram
