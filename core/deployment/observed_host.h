// What a real host is, as a process on it sees it: the facts a deployment
// file's `hosts:` entry states (core/deployment_file/deployment_yaml.h) plus what
// `doctor` reports beside them. Plain data: core reads no machine; the
// backends' probes fill it (apps/observed_host_here.h), the bridge compares
// it with a file's entry (core/deployment_file/host_comparison.h), and
// host_entry_yaml writes the entry a file would hold for it.
//
//   ObservedHost here = observe_this_host(...);       // apps/, over backends/
//   std::string entry = host_entry_yaml(single_host(here));   // doctor --emit-host
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/base/json_output.h"
#include "core/base/status.h"
#include "core/deployment/runtime_environment.h"

namespace engram {

struct ObservedGpu {
  int ordinal = -1;                 // CUDA's ordinal in this process (CUDA_VISIBLE_DEVICES applies)
  std::string device_name;          // CUDA's, e.g. "NVIDIA H200"
  std::string bus_id;               // PCI bus id: the same GPU seen by two ranks of one host
  uint64_t memory_bytes_total = 0;  // cuMemGetInfo's total: what gpu_memory states
  uint64_t memory_bytes_free = 0;
  uint64_t granularity_bytes = 0;   // VMM allocation granularity (0 without VMM)
  bool vmm = false;
  bool posix_fd = false;            // the POSIX fd handle attribute
  bool fabric_attribute = false;    // the FABRIC handle attribute (the attribute alone, not the probe)
  // The real FABRIC probe (create + export): `doctor` on its own runs it on
  // every GPU; a rank's check does not (it allocates on the GPU).
  bool fabric_probed = false;
  bool fabric_works = false;
  std::string fabric_error;         // the probe's Status text when it failed
  std::string nvlink_domain;        // NVML fabric clusterUuid/cliqueId; "" when none
  std::string nvlink_domain_reason; // why nvlink_domain is empty
  std::string error;                // opening or reading the GPU failed: only ordinal is known
};

struct ObservedHost {
  std::string hostname;
  std::string boot_id;
  RuntimeEnvironment environment = RuntimeEnvironment::kUnknown;  // detected (or ENGRAMLAB_ENVIRONMENT)
  // /dev/shm, or the directory a real run uses instead (ENGRAMLAB_SHM_DIR).
  std::string shm_dir = "/dev/shm";
  bool shm_mounted = false;         // a tmpfs is there
  uint64_t shm_total_bytes = 0;
  uint64_t shm_free_bytes = 0;
  std::string shm_not_tmpfs;        // why no tables go there though the directory exists
  std::vector<std::string> imex_channels;  // channel* entries of the IMEX channel directory
  std::optional<uint64_t> host_memory_bytes;   // MemTotal; nullopt: unreadable
  std::optional<uint64_t> memory_limit_bytes;  // the memory cgroup limiting this process; nullopt: none
  std::string memory_limit_cgroup;             // that cgroup's directory
  bool cuda_built = false;          // this engramlab has the CUDA backend
  int gpu_count = 0;                // GPUs this process sees
  std::string no_gpu_reason;        // why gpu_count is 0
  // The GPUs looked at: every visible one (`doctor` on its own) or the
  // rank's own (a launched rank).
  std::vector<ObservedGpu> gpus;
  std::vector<std::string> p2p_lines;  // `doctor` on its own: every ordered pair
  bool p2p_all = true;
};

// The first GPU looked at that could be read, or null.
const ObservedGpu* first_readable_gpu(const ObservedHost& host);

// One host of a job: the facts of its ranks, grouped by (hostname, boot id)
// in rank order.
struct ClusterHost {
  ObservedHost facts;            // its first rank's
  std::vector<int> ranks;        // world ranks on it
  // GPUs on the host: the most any rank saw; where every rank sees one GPU
  // (a container per rank), the distinct GPUs its ranks looked at.
  int gpu_count = 0;
  bool one_gpu_per_rank = false; // visible_gpus_per_rank: 1
};

// `by_rank[r]` is rank r's facts.
std::vector<ClusterHost> cluster_hosts(std::span<const ObservedHost> by_rank);
// A host seen by one process (`doctor` on its own).
ClusterHost single_host(const ObservedHost& host);

// The `hosts:` entry a deployment file would hold for `host` (YAML, a list
// item "- name: ...", no trailing newline), sizes written exactly so it
// parses back to the bytes seen. Where no GPU could be read, `gpus` is the
// host's ranks (one for a lone `doctor`) and the GPU fields are left out,
// with a comment saying so; a GPU engramlab has no model of is a comment
// naming it, beside its exact gpu_memory.
std::string host_entry_yaml(const ClusterHost& host);
// "hosts:\n" and every host's entry.
std::string cluster_hosts_yaml(std::span<const ClusterHost> hosts);

// The facts as JSON (doctor --json, and how ranks send them to rank 0), and
// back: invalid_argument naming the field for a document that is not one.
Json observed_host_json(const ObservedHost& host);
Result<ObservedHost> observed_host_from_json(const Json& json);

}  // namespace engram
