#include "core/deployment_file/deployment_as_written.h"

#include "core/base/check.h"
#include "core/base/yaml_fields.h"
#include "core/deployment_file/deployment_yaml.h"

namespace engram {

WrittenHost DeploymentAsWritten::host(int index) const {
  ENGRAM_CHECK(index >= 0 && static_cast<size_t>(index) < deployment.hosts.size());
  ENGRAM_CHECK(host_fields.size() == deployment.hosts.size());
  return WrittenHost{index, deployment.hosts[static_cast<size_t>(index)], host_fields[static_cast<size_t>(index)]};
}

Result<DeploymentAsWritten> parse_deployment_as_written(std::string_view text, std::string_view source_name) {
  ENGRAM_ASSIGN_OR_RETURN(YAML::Node root, load_yaml_text(text, source_name));
  DeploymentAsWritten out;
  out.source = std::string(source_name);
  ENGRAM_ASSIGN_OR_RETURN(out.deployment, parse_deployment(root, source_name));
  // The parser accepted the file, so hosts is a list of maps and every
  // count is a whole number; an entry of count N is N hosts.
  for (const YAML::Node& entry : root["hosts"]) {
    std::set<std::string> fields;
    for (const auto& kv : entry) fields.insert(kv.first.Scalar());
    const int count = entry["count"] ? entry["count"].as<int>() : 1;
    for (int c = 0; c < count; ++c) out.host_fields.push_back(fields);
  }
  ENGRAM_CHECK(out.host_fields.size() == out.deployment.hosts.size());
  return out;
}

Result<DeploymentAsWritten> load_deployment_as_written(const std::string& path) {
  ENGRAM_ASSIGN_OR_RETURN(std::string text, read_text_file(path, "--file"));
  return parse_deployment_as_written(text, path);
}

}  // namespace engram
