// `engramlab scenario run --real FILE...`: each scenario on N real processes
// of this host (`engramlab launch -n N -- engramlab scenario rank FILE`),
// checked against its expectations the way the emulator checks them, and
// compared rank by rank with an emulator run of the same file: placement,
// warnings (key and text), error kind and the hash of every lookup output.
//
// Real ranks use this machine's facts (hostname, the tmpfs total of
// /dev/shm or ENGRAMLAB_SHM_DIR), not the scenario's host description; the
// header line shows both, so a difference is explained. To reproduce a
// scenario's host, run inside namespaces that give it that hostname and
// tmpfs size (tests/real_runtime_test.cc does).
//
// Refused: more than one host (needs the cluster's launcher, which runs
// `engramlab scenario rank FILE` on every host) or more than kMaxRealRanks
// ranks. Device placements run where every rank gets a GPU of its own
// (the CUDA backend built, at least N GPUs visible: rank r opens GPU r, the
// handle exchange passes real POSIX fds of cuMemCreate allocations between
// the processes, and lookups read rows through the imported mappings).
// Skipped, visibly and never counted as passed: device placements without
// enough GPUs ("skipped: needs GPUs") and fault plans (emulator fault sites).
#pragma once

#include <string>
#include <vector>

#include "harness/scenario.h"

namespace engram::app {

inline constexpr int kMaxRealRanks = 16;

// Exit codes as `scenario run`: 0 every scenario that ran passed (skips do
// not fail), 1 one failed or was refused.
int run_scenarios_real(const std::vector<Scenario>& scenarios);

}  // namespace engram::app
