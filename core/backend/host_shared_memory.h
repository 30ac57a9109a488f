// Host tables in /dev/shm: tmpfs facts, named segments created by one writer
// and mapped read-only by co-located ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace engram {

struct ShmInfo {
  bool mounted = false;  // a tmpfs is there (a plain directory or a disk mount is not one)
  std::string not_tmpfs;  // not mounted, yet the directory exists: what it is instead, for errors
  uint64_t tmpfs_bytes_total = 0;  // the same on every rank of a node: decide on this
  uint64_t tmpfs_bytes_free = 0;   // differs between ranks over time: never decide on this
};

// Every segment of a job is named "engramlab-<job_id>-<part>-layer<L>", or
// "engramlab-<job_id>-<part>-layer<L>-tp<T>" for a TP slice
// (core/placements/host_shared.h makes them from this prefix).
//
// <part> is 16 lowercase hex characters no other user can guess. Job ids are
// predictable (Slurm's, the launcher's), and a user who knows a job's names
// can create them first in the shared /dev/shm and stop the job (issue 50,
// item 10). Real ranks derive it from the job token (ipc::shm_name_part in
// backends/ipc/job_token.h); the emulator and tests keep kFixedShmNamePart:
// their segments live in the emulator's memory, and a run stays
// deterministic from its seed.
inline constexpr size_t kShmNamePartChars = 16;
inline constexpr std::string_view kFixedShmNamePart = "0000000000000000";
bool is_shm_name_part(std::string_view part);
// Asserts is_shm_name_part(name_part).
std::string shm_segment_prefix(const std::string& job_id, std::string_view name_part);
// Whether `name` is exactly one of job `job_id`'s segment names, whatever
// its part (`shm clean --job-id J` and the start-up cleanup find every run of
// job J; ownership and the lock decide what goes). Job ids may hold '-', so
// the prefix alone would let job "a" take job "a-b"'s segments; the rest must
// be <part>-layer<digits>[-tp<digits>].
bool is_job_segment_name(std::string_view name, std::string_view job_id);

class ShmMapping {
 public:
  virtual ~ShmMapping() = default;  // unmaps
  virtual std::span<std::byte> bytes() = 0;  // empty-writable for read-only maps: use data()
  virtual std::span<const std::byte> data() const = 0;
  virtual const std::string& name() const = 0;
};

class HostSharedMemory {
 public:
  virtual ~HostSharedMemory() = default;
  virtual Result<ShmInfo> info() = 0;
  // Exclusive create (mode 0600), sized and mapped writable. kAlreadyExists
  // when a segment of that name is left over; kResourceExhausted when tmpfs
  // cannot hold it.
  virtual Result<std::unique_ptr<ShmMapping>> create(const std::string& name, uint64_t bytes) = 0;
  virtual Result<std::unique_ptr<ShmMapping>> open_read_only(const std::string& name, uint64_t bytes) = 0;
  virtual Status unlink(const std::string& name) = 0;
};

}  // namespace engram
