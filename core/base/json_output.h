// One JSON shape for every command's --json output, written with
// nlohmann::json (Debian: nlohmann-json3-dev):
//
//   {"schema_version": 1, "command": "plan", ...command fields...,
//    "warnings": [{"key": "...", "text": "..."}],
//    "error": null | {"code": "invalid_argument", "message": "...",
//                     "rank": 3 | null, "peer": 5 | null, "step": "map" | null}}
//
// A value that does not apply or is unknown is null, never "-" or "".
// Output is always valid UTF-8: bytes that are not (a file name, say) are
// replaced by U+FFFD, so a strict parser reads every document.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/base/status.h"
#include "core/base/warnings.h"

namespace engram {

// Keys keep the order they were written in: people read these documents too.
using Json = nlohmann::ordered_json;

// Bumped when a field changes meaning or disappears (adding one does not).
inline constexpr int kJsonSchemaVersion = 1;

// {"schema_version": 1, "command": <command>}: every document starts so.
Json json_document(std::string_view command);

Json warning_json(const Warning& warning);
Json warnings_json(std::span<const Warning> warnings);

// {code, message, rank, peer, step}; rank/peer -1 and an empty step are null.
Json error_json(const Status& status);
// null for ok.
Json error_json_or_null(const Status& status);

// A string, or null when absent.
Json string_or_null(const std::optional<std::string>& text);

// One line, no trailing newline; invalid UTF-8 replaced, never thrown.
std::string dump_json(const Json& document);

// A document for a command that failed before it had anything else to say:
// json_document + "warnings": [] + "error".
Json error_document(std::string_view command, const Status& status);

}  // namespace engram
