// Reading a scenario file's fields (harness/scenario.h): the scenario's own
// value forms (whole numbers in a range, seeds, probabilities, sizes as
// written, fault sites) on top of the shared field reading
// (core/base/yaml_fields.h), for the scenario parser and the parser of its
// lookup steps (harness/lookup_steps_yaml.cc). Errors as YamlFields writes
// them: "<file>: line L, column C: <field>: <problem and fix>".
#pragma once

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/field_errors.h"
#include "core/base/size_text.h"
#include "core/base/text_excerpt.h"
#include "core/base/units.h"
#include "core/base/yaml_fields.h"
#include "harness/scenario.h"
#include "sim/faults.h"

namespace engram::harness {

// The scenario's own value forms on top of the shared field reading.
class ScenarioReader : public YamlFields {
 public:
  using YamlFields::YamlFields;

  Status expect_map(const YAML::Node& node, std::string_view path, std::string_view example) const {
    if (node.IsMap()) return Status::ok();
    return error(node, path, fmt::format("expected a map, found {}; write e.g. {}", describe(node), example));
  }

  Result<int64_t> integer(const YAML::Node& node, std::string_view path, int64_t min_value, int64_t max_value) const {
    ENGRAM_ASSIGN_OR_RETURN(std::string t, text(node, path));
    int64_t value = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
    if (ec != std::errc() || end != t.data() + t.size())
      return error(node, path, fmt::format("'{}' is not a whole number in [{}, {}]; write e.g. {}", excerpt(t), min_value,
                                           max_value, std::max<int64_t>(min_value, 1)));
    if (value < min_value || value > max_value)
      return error(node, path, fmt::format("'{}' is not a whole number in [{}, {}]; write e.g. {}", value, min_value,
                                           max_value, std::max<int64_t>(min_value, 1)));
    return value;
  }

  Result<uint64_t> seed(const YAML::Node& node, std::string_view path) const {
    ENGRAM_ASSIGN_OR_RETURN(std::string t, text(node, path));
    uint64_t value = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
    if (ec != std::errc() || end != t.data() + t.size())
      return error(node, path, fmt::format("'{}' is not a whole number in [0, 18446744073709551615]; write e.g. 1",
                                           excerpt(t)));
    return value;
  }

  Result<double> probability(const YAML::Node& node, std::string_view path) const {
    ENGRAM_ASSIGN_OR_RETURN(std::string t, text(node, path));
    double value = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
    if (ec != std::errc() || end != t.data() + t.size() || !(value >= 0.0 && value <= 1.0))
      return error(node, path, fmt::format("'{}' is not a probability; write a number in [0, 1], e.g. 0.05", excerpt(t)));
    return value;
  }

  // A number above `above` and at most `max_value`, decimals allowed
  // ("12.5", "2"): times and factors.
  Result<double> number(const YAML::Node& node, std::string_view path, double above, double max_value,
                        std::string_view example) const {
    ENGRAM_ASSIGN_OR_RETURN(std::string t, text(node, path));
    double value = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
    if (ec != std::errc() || end != t.data() + t.size() || !(value > above && value <= max_value))
      return error(node, path, fmt::format("'{}' is not a number above {} and at most {}; write e.g. {}", excerpt(t),
                                           above, max_value, example));
    return value;
  }

  Result<std::vector<std::string>> text_list(const YAML::Node& node, std::string_view path) const {
    if (!node.IsSequence())
      return error(node, path, fmt::format("expected a list, found {}; write e.g. [word, \"other words\"]", describe(node)));
    std::vector<std::string> out;
    for (size_t i = 0; i < node.size(); ++i) {
      ENGRAM_ASSIGN_OR_RETURN(std::string t, text(node[i], fmt::format("{}[{}]", path, i)));
      out.push_back(std::move(t));
    }
    return out;
  }

  Result<std::string> fault_site(const YAML::Node& node, std::string_view path) const {
    ENGRAM_ASSIGN_OR_RETURN(std::string t, text(node, path));
    if (sim::parse_fault_site(t).is_ok()) return t;
    return error(node, path, fmt::format("'{}' is not a fault site; write one of {}", excerpt(t), sim::fault_site_names()));
  }

  // A size as written, decimals allowed ("23.6GiB"); the tolerance is half
  // a unit of the last written digit, in the written unit.
  Result<ExpectedSize> size(const YAML::Node& node, std::string_view path) const {
    ENGRAM_ASSIGN_OR_RETURN(std::string t, text(node, path));
    size_t number_end = 0;
    while (number_end < t.size() && (std::isdigit(static_cast<unsigned char>(t[number_end])) || t[number_end] == '.'))
      ++number_end;
    std::string unit = t.substr(number_end);
    unit.erase(0, unit.find_first_not_of(' '));
    double value = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + number_end, value);
    auto unit_bytes = parse_bytes("1" + unit, path);
    if (number_end == 0 || ec != std::errc() || end != t.data() + number_end || !unit_bytes.is_ok())
      return error(node, path,
                   fmt::format("'{}' is not a size; write a number with a unit, e.g. 23.6GiB, 64MiB or 4096B", excerpt(t)));
    const size_t dot = t.find('.');
    const int decimals = dot == std::string::npos || dot >= number_end ? 0 : static_cast<int>(number_end - dot - 1);
    ExpectedSize s;
    s.text = t;
    s.bytes = static_cast<uint64_t>(std::llround(value * static_cast<double>(unit_bytes.value())));
    s.tolerance_bytes =
        static_cast<uint64_t>(static_cast<double>(unit_bytes.value()) * 0.5 * std::pow(10.0, -decimals));
    return s;
  }
};

// A section that must be a map, its keys checked; false when it is no map.
inline bool open_section(const ScenarioReader& r, const YAML::Node& node, std::string_view path, std::string_view example,
                  std::span<const char* const> keys, FieldErrors& e) {
  if (!e.add(r.expect_map(node, path, example))) return false;
  e.add(r.check_keys(node, path, keys));
  return true;
}

}  // namespace engram::harness
