// Who this process is in the emulated world: the world file
// (ENGRAMLAB_EMULATED_WORLD), its rank (RANK, OMPI_COMM_WORLD_RANK or
// SLURM_PROCID, as backends/ipc/launch_env.h reads them), hence its host, and
// the GPUs it sees (CUDA_VISIBLE_DEVICES). Also the per-GPU memory ledger
// shared by every process of the world, and the armed faults.
//
// The ledger keeps no state of its own: the memory in use on emulated GPU g
// of host h is the size of every distinct memfd named for (world, h, g) that
// a process of the world holds open (/proc/<pid>/fd; the world's processes
// are those bound to its abstract member socket); the driver holds one descriptor
// per allocation handle and per mapping. A process killed by SIGKILL drops
// its descriptors, so its memory comes back without anyone cleaning up, and
// nothing exists on disk to outlive the job. Creation is serialised by an
// flock on the world file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/emulated_driver/emulated_world.h"

namespace engram::emulated {

struct Process {
  bool ready = false;
  std::string error;         // why not ready: no world file, bad file, unknown rank
  std::string world_path;
  std::string world_id;      // 16 hex digits: names memfds and the IMEX sockets of this world
  World world;
  int world_fd = -1;         // the world file, held open for flock
  int member_fd = -1;        // abstract socket "engramlab-emu-proc.<world>.<pid>": this process is of the world
  int rank = 0;
  int host = 0;
  std::vector<int> visible;  // CUDA ordinal -> GPU index on the host

  const WorldHost& my_host() const { return world.hosts[static_cast<size_t>(host)]; }
  // "rank 3 (host gb300-0)"
  std::string where() const;
};

// Loaded once per process; read-only afterwards.
const Process& process();

// The memfd name of an allocation on GPU `gpu` of host `host`.
std::string memfd_name(const Process& p, int host, int gpu);
// Parses a /proc/<pid>/fd link ("/memfd:<name> (deleted)") of this world;
// false for anything else.
bool parse_memfd_link(const Process& p, const std::string& link, int& host, int& gpu);
// Bytes in use on (host, gpu) across every process of the world.
uint64_t used_bytes(const Process& p, int host, int gpu);

// flock on the world file for the life of the guard.
class WorldLock {
 public:
  explicit WorldLock(const Process& p);
  ~WorldLock();
  WorldLock(const WorldLock&) = delete;
  WorldLock& operator=(const WorldLock&) = delete;

 private:
  int fd_;
};

enum class FaultOutcome { kProceed, kFail };
// Visits fault site `site` ("create", "export", "import", "map", "access"):
// kFail when an armed fault fires (it says so on stderr, one line naming the
// site, the rank and the call, which the tests count). "hang" and "slow"
// faults are visited by the import call: hang blocks until the process is
// killed, slow sleeps and proceeds.
FaultOutcome visit_fault(const Process& p, const char* site);

// One line on stderr, prefixed "engramlab emulated driver: ".
void say(const std::string& line);

}  // namespace engram::emulated
