// Deadlines of the emulator's blocking steps, in simulated time (see
// sim/scheduler.h for the clock). The defaults are the real backend's
// (backends/ipc: op_timeout for a collective or an fd, join_timeout for
// forming a group).
#pragma once

#include "sim/scheduler.h"

namespace engram::sim {

struct SimTimeouts {
  SimTimeUs collective_us = 60'000'000;  // a collective: every member arrives within it
  SimTimeUs split_us = 30'000'000;       // forming a group (the real backend's join timeout)
  SimTimeUs fd_receive_us = 60'000'000;  // an fd from a peer over the Unix socket
};

}  // namespace engram::sim
