// The world an emulated driver process lives in, read from the file
// ENGRAMLAB_EMULATED_WORLD names (written by world_file.h from a deployment
// file, with every GPU fact already resolved by core: memory, granularity,
// IMEX channel, NVLink domain). Standard library only: this is compiled into
// the emulated libcuda.so.1 and libnvidia-ml.so.1, which cannot link core.
//
// The file, one record a line, fields as key=value without spaces:
//   engramlab-emulated-world 1
//   host name=gb300-0 boot_id=boot-gb300-0 gpus=4 model=GB300 memory_bytes=N
//        granularity_bytes=N domain=nvl72-a imex=1 fabric=1 posix=1 visible_gpus_per_rank=0
//   ranks 0 0 0 0 1 1 1 1        (rank -> host index)
//   fault site=import rank=5 nth=1     (optional; site create|export|import|map|access|hang|slow)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace engram::emulated {

struct WorldHost {
  std::string name;
  std::string boot_id;
  int gpus = 0;
  std::string model;               // "GB300"
  uint64_t memory_bytes = 0;       // per GPU, as cuMemGetInfo's total
  uint64_t granularity_bytes = 0;  // cuMemGetAllocationGranularity
  std::string domain;              // NVLink/IMEX domain, "" for none
  bool imex = false;
  bool fabric = false;             // CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED
  bool posix = true;               // CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
  int visible_gpus_per_rank = 0;   // 1: a container that sees one GPU
};

// A fault armed at a site for one rank (-1: every rank): the nth call there
// (1-based; 0: every call) fails with the site's code; "hang" blocks the call
// until the process is killed, "slow" delays it by `delay_ms`.
struct WorldFault {
  std::string site;
  int rank = -1;
  int nth = 1;
  int delay_ms = 0;
};

struct World {
  std::vector<WorldHost> hosts;
  std::vector<int> rank_hosts;
  std::vector<WorldFault> faults;
};

// Parses the file's text; on error returns false with `error` naming the
// line and the field.
bool parse_world(const std::string& text, World& out, std::string& error);

// Host names and domains go into the file unquoted: no spaces, '=' or
// control characters. Empty when `value` may be written, else why not.
std::string unwritable_world_value(const std::string& value);

}  // namespace engram::emulated
