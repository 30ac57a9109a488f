// A deployment file with what each host entry states: the parsed deployment
// (core/deployment_file/deployment_yaml.h), whose defaults fill every field left
// out, and the fields each entry wrote. The bridge (host_comparison.h)
// compares only what a file states: a field left out is not a difference.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/deployment/deployment.h"

namespace engram {

// One host entry: `index` into the deployment's hosts (after `count:`
// repeats an entry, each copy states what the entry states).
struct WrittenHost {
  int index = -1;
  HostSpec spec;
  std::set<std::string> fields;  // the keys written: "gpu_model", "shm_size", ...
  bool states(std::string_view field) const { return fields.count(std::string(field)) != 0; }
};

struct DeploymentAsWritten {
  std::string source;  // the file
  Deployment deployment;
  std::vector<std::set<std::string>> host_fields;  // by host index
  WrittenHost host(int index) const;
};

// The parser's errors as they are (invalid_argument, every error a line).
Result<DeploymentAsWritten> parse_deployment_as_written(std::string_view text, std::string_view source_name);
Result<DeploymentAsWritten> load_deployment_as_written(const std::string& path);

}  // namespace engram
