// `engramlab scenario run --real FILE...`: each scenario on N real processes
// of this host (`engramlab launch -n N -- engramlab scenario rank FILE`),
// checked against its expectations the way the emulator checks them, and
// compared rank by rank with an emulator run of the same file: placement,
// warnings (key and text), error kind and the hash of every lookup output.
//
// Real ranks use this machine's facts (hostname, the tmpfs total of
// /dev/shm or ENGRAMLAB_SHM_DIR), not the scenario's host description. When
// the scenario's decisions or warnings depend on them (host placements, any
// warning) and this host differs, the scenario is skipped with the line that
// reproduces its host in namespaces (tests/real_runtime_test.cc does), unless
// `--here` asks to run it on this machine as it is and show what differs.
//
// Skipped too, each with the way to run it: more than one host (the cluster's
// launcher runs `engramlab scenario rank FILE` on every host) and more than
// kMaxRealRanks ranks. Device placements run where every rank gets a GPU of its own
// (the CUDA backend built, at least N GPUs visible: rank r opens GPU r, the
// handle exchange passes real POSIX fds of cuMemCreate allocations between
// the processes, and lookups read rows through the imported mappings).
// Skipped, visibly and never counted as passed: device placements without
// enough GPUs ("skipped: needs GPUs") and fault plans (emulator fault sites).
#pragma once

#include <string>
#include <vector>

#include "harness/scenario.h"

namespace engram::harness {

inline constexpr int kMaxRealRanks = 16;

struct RealRunOptions {
  bool here = false;  // run even where this host is not the scenario's
};

// Exit codes as `scenario run`: 0 every scenario that ran passed (skips do
// not fail), 1 one failed.
int run_scenarios_real(const std::vector<Scenario>& scenarios, const RealRunOptions& options = {});

}  // namespace engram::harness
