// One rank's outcome of a scenario as one JSON line, written by each real
// process (`engramlab scenario rank`) and read back by the process that
// launched them (`engramlab scenario run --real`):
//
//   {"rank":2,"started":true,"placement":"host_shared","handle_type":null,
//    "looked_up":true,"lookup_mismatch":"","ids_checked":24,"ids_mismatch":"",
//    "lookup_hashes":["9a0c...","..."],
//    "warnings":[{"key":"...","text":"..."}],
//    "error":null | {"code":"unavailable","message":"...","rank":2,"peer":0,"step":"..."}}
// (the error object of every --json document: core/base/json_output.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "harness/scenario_rank.h"
#include "core/base/status.h"
#include "core/base/warnings.h"

namespace engram::harness {

struct ScenarioRankRecord {
  int rank = -1;
  ScenarioRankResult result;
  std::vector<Warning> warnings;  // what this process's sink saw, in order
  Status status;                  // ok, or the rank's failure with its context
};

std::string format_rank_record(const ScenarioRankRecord& record);  // one line, no newline

// Errors name `source` and the field.
Result<ScenarioRankRecord> parse_rank_record(std::string_view line, std::string_view source);

}  // namespace engram::harness
