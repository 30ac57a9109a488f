// The bridge from a deployment file to the real cluster: which entry of the
// file a real host is (by hostname, or through --host-map where the
// cluster's names differ), and every difference between what that entry
// states and what the host really is (core/deployment/observed_host.h).
// Only what the file states is compared (deployment_as_written.h): a field
// left out is the parser's default, not a claim about the host.
//
// A difference is one line naming the entry, the field, the file's value and
// the real one:
//   hosts[0] 'h200-0' gpu_model: the file says H100, this host has H200 (NVIDIA H200)
//   hosts[0] 'h200-0' shm_size: the file says 190 GiB, /dev/shm here is 64 MiB
// A stated field this process cannot see (no GPU readable, a Kubernetes
// sizeLimit) is a "not checked" line, never silently passed.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/deployment_file/deployment_as_written.h"
#include "core/deployment/observed_host.h"

namespace engram {

// --host-map REAL=FILE[,REAL=FILE]: the real hostname each file name stands for.
struct HostMap {
  std::vector<std::pair<std::string, std::string>> real_to_file;
  // The file's name for a real hostname (the name itself where unmapped).
  std::string file_name_of(const std::string& real_hostname) const;
};
// invalid_argument naming --host-map, the item and the form.
Result<HostMap> parse_host_map(std::string_view text);

struct FactsComparison {
  std::vector<std::string> differences;
  std::vector<std::string> not_checked;
  void append(FactsComparison other);
};

// Every stated field of `file_host` against `real`. Tolerances (see the .cc):
// gpu_memory 1%, host_memory 5%, shm_size 1%, memory_limit_per_rank one page.
FactsComparison host_differences(const WrittenHost& file_host, const ObservedHost& real);

// The entry of `file` a process on `real` (world rank `rank`, or -1 for a
// process of no launched job) stands for. A launched rank inside the file's
// world is placed by the file's rank -> host map (`rank_hosts`, resolved):
// running on another host is a difference naming both. Otherwise the first
// entry with the host's (mapped) name. An unknown host is failed_precondition
// naming the hostname, the file's host names and the --host-map fix.
struct HostMatch {
  int host_index = -1;
  std::vector<std::string> differences;  // the rank runs on another entry's host than the file says
};
Result<HostMatch> match_host(const DeploymentAsWritten& file, std::span<const int> rank_hosts, const HostMap& map,
                             int rank, const ObservedHost& real);

// Across the hosts of one job (every rank's facts known): the file's NVLink
// domain labels are names, so they are compared by grouping: hosts the file
// puts in one domain must share a real domain, and hosts it puts in
// different domains must not. `host_index_by_rank[r]` is rank r's entry.
std::vector<std::string> nvlink_domain_differences(const DeploymentAsWritten& file,
                                                   std::span<const int> host_index_by_rank,
                                                   std::span<const ObservedHost> by_rank);

}  // namespace engram
