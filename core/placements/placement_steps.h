// The backend steps a placement's build runs, as bits. Core names the steps
// (each placement's registration says which it runs); the emulator maps its
// fault sites onto them (sim/faults.h), so the swarm aims faults at the
// sites a deployment's planned placements reach without core knowing sim.
#pragma once

#include <cstdint>

namespace engram {

enum PlacementSteps : uint8_t {
  kRunsNoBackendStep = 0,
  kExportsDeviceMemory = 1,  // exports its VMM shards, passes the handles, imports its peers'
  kMapsDeviceMemory = 2,     // maps VMM memory (its own shard or its peers') and sets access
  kCreatesHostSegments = 4,  // creates and fills /dev/shm segments
  kRunsAnyStep = kExportsDeviceMemory | kMapsDeviceMemory | kCreatesHostSegments,
};

}  // namespace engram
