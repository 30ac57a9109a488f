// The emulated IMEX service: what makes a 64-byte FABRIC handle resolve to
// memory in another process of the same NVLink domain.
//
// On a real rack the IMEX daemon of each node brokers the exporting node's
// memory to importers of its domain. Here each exporting process answers for
// its own exports: on its first FABRIC export it listens on an abstract Unix
// socket named for the world and its pid, and hands an export's memfd over
// SCM_RIGHTS to an importer that presents the handle, after checking that the
// importer has FABRIC support and an IMEX channel and is in the exporter's
// domain (core/backend/vmm_world_rules.h, the emulator's rules). An abstract
// socket has no file: it disappears with the process, SIGKILL included, so no
// service, socket or file outlives the job, and an import from a dead
// exporter finds nobody (connection refused).
#pragma once

#include <cstdint>
#include <string>

#include "backends/emulated_driver/emulated_process.h"

namespace engram::emulated {

inline constexpr size_t kFabricHandleBytes = 64;

// Registers `fd` (a memfd this call dups) as an export and writes its handle.
// False with `error` when the service cannot listen.
bool register_fabric_export(const Process& p, int fd, int gpu, uint64_t bytes, uint64_t& export_id,
                            unsigned char (&handle)[kFabricHandleBytes], std::string& error);
// Forgets an export (its allocation was released); later imports are refused.
void unregister_fabric_export(uint64_t export_id);

struct FabricImport {
  const char* cu_error = nullptr;  // nullptr: ok, `fd` is a new descriptor of the memory
  std::string why;
  int fd = -1;
  int host = -1;
  int gpu = -1;
  uint64_t bytes = 0;
};
// Resolves a handle through its exporter's service.
FabricImport import_fabric(const Process& p, const unsigned char (&handle)[kFabricHandleBytes]);

}  // namespace engram::emulated
