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
// kMaxRealRanks ranks. Device placements run where every rank gets a GPU of its own,
// or the share the file's ranks_per_gpu gives it (the CUDA backend built, at
// least N / ranks_per_gpu GPUs visible: rank r opens GPU r / ranks_per_gpu, the
// handle exchange passes real POSIX fds of cuMemCreate allocations between
// the processes, and lookups read rows through the imported mappings).
// Skipped, visibly and never counted as passed: device placements without
// enough GPUs ("skipped: needs GPUs") and fault plans (emulator fault sites).
// With emulate_driver (below) the scenario's own world stands in for this
// host's, its GPUs included.
#pragma once

#include <string>
#include <vector>

#include "harness/scenario.h"

namespace engram::harness {

inline constexpr int kMaxRealRanks = 16;
// Over the emulated driver a rank is a small process with no GPU of its own:
// one NVL72 rack's worth.
inline constexpr int kMaxEmulatedDriverRanks = 72;

struct RealRunOptions {
  bool here = false;  // run even where this host is not the scenario's
  // Every rank over the emulated CUDA driver and NVML (backends/emulated_driver)
  // as the rank of the scenario's world it is: hosts, GPUs, NVLink domains and
  // IMEX channels are the file's, not this machine's, so more than one host
  // and device placements run without a GPU. Runs the scenarios whose every
  // rank plans device_peer (or whose plan fails): host placements would share
  // this machine's /dev/shm across the emulated hosts, and device_collective
  // and device_head_sharded need NCCL, which the emulated driver refuses.
  // Planned faults at import, map and access are armed in the driver.
  bool emulate_driver = false;
};

// Exit codes as `scenario run`: 0 every scenario that ran passed (skips do
// not fail), 1 one failed.
int run_scenarios_real(const std::vector<Scenario>& scenarios, const RealRunOptions& options = {});

}  // namespace engram::harness
