// What main() does with the command line before CLI11 reads it: the
// single-dash spellings of other tools (-tp) become ours (--tp) on a command
// that takes ours, and a flag the command does not take is refused with the
// closest of the command's own flags -- "unknown flag --tp-sise; did you mean
// --tp-size (the same as --tp)?" -- instead of CLI11's "The following
// arguments were not expected"; so is a word where only a command can stand
// ("engramlab pln": did you mean plan?). Words after `--` are the ranks'
// command and are not read.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "core/base/status.h"

namespace engram::app {

// `args` is argv without the program name; rewritten in place. An unknown
// flag is invalid_argument naming it, the command and the fix.
Status check_flags(const CLI::App& app, std::vector<std::string>& args);

}  // namespace engram::app
