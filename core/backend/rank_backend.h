// Everything one rank talks to, as a bundle of the interfaces. The emulator
// and the real machine each hand the core one of these per rank.
#pragma once

#include "core/backend/collectives.h"
#include "core/backend/device_compute.h"
#include "core/backend/device_memory.h"
#include "core/backend/fd_channel.h"
#include "core/backend/host_probe.h"
#include "core/backend/host_shared_memory.h"
#include "core/backend/process_shared_memory.h"
#include "core/backend/step_clock.h"

namespace engram {

struct RankBackend {
  int world_rank = -1;
  int world_size = 0;
  Collectives* world = nullptr;       // all ranks of the job
  DeviceMemory* device = nullptr;     // null where no device is used
  FdChannel* fds = nullptr;
  HostSharedMemory* shm = nullptr;
  HostProbe* probe = nullptr;
  DeviceCompute* compute = nullptr;   // null where no device is used; with `device` where one is
  ProcessSharedMemory* memfd = nullptr;  // memfds opened through /proc/<pid>/fd (SGLang's shared host table)
  StepClock* step_clock = nullptr;    // the emulator's, where it prices lookup steps; null on a real machine
};

}  // namespace engram
