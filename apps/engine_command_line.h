// `plan --from "vllm serve ..."` / `--from "python -m sglang.launch_server
// ..."`: an engine's own command line, as a user pastes it, read for the
// settings Engram depends on (TP, DP, DP-local, EP, PP, prefill CP, the
// maximum model length, the model, --engram-config, CPU offload, the
// engine's memory fraction) and turned into plan's own flags. Flags with no
// bearing on Engram are listed as ignored; a flag neither engine knows is
// refused with a did-you-mean.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/status.h"

namespace engram::app {

struct EngineCommandLine {
  std::string engine;  // "vllm" or "sglang"
  // plan's flags (without the dashes: "tp", "dp", "hosts", "gpus-per-host",
  // "context-length", ...) and their values, in the order read.
  std::vector<std::pair<std::string, std::string>> plan_flags;
  std::vector<std::string> ignored;  // "--port 8000", "--trust-remote-code": no bearing on Engram
  std::vector<std::string> notes;    // how a setting was read ("-dp 8 --data-parallel-size-local 4: 2 hosts")
};

// Words as a POSIX shell splits them: spaces separate, '...' and "..."
// quote, a backslash escapes the next character (and a backslash-newline
// joins lines, as pasted from a script). An unclosed quote is an error.
Result<std::vector<std::string>> split_command_words(std::string_view text);

// `text` the command line; `engine_hint` the engine plan was told (--engine)
// for a bare list of flags, else empty. Errors name the flag, the value and
// the fix.
Result<EngineCommandLine> read_engine_command_line(std::string_view text, std::string_view engine_hint);

}  // namespace engram::app
