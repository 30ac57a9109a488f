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

// Every segment of a job is named "engramlab-<job_id>-layer<L>", or
// "engramlab-<job_id>-layer<L>-tp<T>" for a TP slice
// (core/placements/host_shared.h makes them from this prefix).
std::string shm_segment_prefix(const std::string& job_id);
// Whether `name` is exactly one of job `job_id`'s segment names. Job ids may
// hold '-', so the prefix alone would let job "a" take job "a-b"'s segments
// (engramlab-a-b-layer1); the rest must be layer<digits>[-tp<digits>].
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
