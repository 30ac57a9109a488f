// A Deployment written as YAML (docs/design.md section 3):
//
//   model: deepseek-v4.1-flash
//   hosts:
//     - {name: gb200, count: 2, gpus: 4, gpu_model: GB200, shm_size: 190GiB,
//        nvlink_domain: nvl72-a, imex_channel: true, fabric_attribute: true}
//   rank_hosts: [0, 0, 1, 1]          # optional; host indices or names
//   layout: {tp: 1, dp: 4, ep: 1, elastic_ep: false, prefill_cp: 1}
//   config: {cpu_offload: true, peer_shards: false, dp_shared_memory: unset,
//            shard_group: world, tokens_per_rank_max: 1024}
//
// A host entry is one /dev/shm namespace: a machine, or a container that does
// not share the host's IPC namespace (two such containers of one machine are
// two entries with the same name and boot_id). `shm_size: none` means /dev/shm
// is missing; an absent shm_size means Docker's default, 64 MiB. `count: N`
// repeats the entry, suffixing name (and boot_id, when given) with -0..-N-1.
//
// Field-level checks only: cross-field checks (tp * dp against the hosts)
// happen in validate_and_complete, after command-line overrides. Every error
// of the file is reported at once: invalid_argument with one error a line,
// "<source>: line L, column C: <field path>: <value and fix>".
#pragma once

#include <yaml-cpp/yaml.h>

#include <span>
#include <string>
#include <string_view>

#include "core/deployment/deployment.h"
#include "core/base/field_errors.h"
#include "core/base/status.h"

namespace engram {

inline constexpr uint64_t kDockerDefaultShmBytes = 64ull * 1024 * 1024;

// `node` must be a map with keys model/hosts/rank_hosts/layout/config; any
// other key is an error.
Result<Deployment> parse_deployment(const YAML::Node& node, std::string_view source_name);
// The same, skipping `ignored_keys` at the top level (for formats that embed
// a deployment beside their own sections, e.g. scenario files).
Result<Deployment> parse_deployment(const YAML::Node& node, std::string_view source_name,
                                    std::span<const std::string> ignored_keys);

// The same for a format that reads its own sections too and reports every
// error of the file at once: the fields that read, with every error of the
// deployment part added to `errors` (core/base/field_errors.h).
Deployment parse_deployment_fields(const YAML::Node& node, std::string_view source_name,
                                   std::span<const std::string> ignored_keys, FieldErrors& errors);

Result<Deployment> parse_deployment_text(std::string_view text, std::string_view source_name);
Result<Deployment> load_deployment_file(const std::string& path);

}  // namespace engram
