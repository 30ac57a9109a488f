#include "harness/scenario_rank_record.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <charconv>

#include "core/base/json_writer.h"

namespace engram {
namespace {

Result<ErrorCode> parse_error_kind(const std::string& text) {
  for (int k = static_cast<int>(ErrorCode::kInvalidArgument); k <= static_cast<int>(ErrorCode::kInternal); ++k)
    if (text == error_code_name(static_cast<ErrorCode>(k))) return static_cast<ErrorCode>(k);
  return invalid_argument(fmt::format("unknown error kind '{}'", text));
}

}  // namespace

std::string format_rank_record(const ScenarioRankRecord& record) {
  const ScenarioRankResult& r = record.result;
  JsonWriter w;
  w.begin_object();
  w.key("rank").value(record.rank);
  w.key("started").value(r.started);
  w.key("placement");
  if (r.started) w.value(placement_name(r.placement));
  else w.null();
  w.key("handle_type");
  if (r.handle_type) w.value(handle_type_name(*r.handle_type));
  else w.null();
  w.key("looked_up").value(r.looked_up);
  w.key("lookup_mismatch").value(r.lookup_mismatch);
  w.key("lookup_hashes").begin_array();
  for (uint64_t h : r.lookup_hashes) w.value(fmt::format("{:016x}", h));  // strings: YAML/JSON readers lose 64-bit ints
  w.end_array();
  w.key("warnings").begin_array();
  for (const Warning& warning : record.warnings)
    w.begin_object().key("key").value(warning.key).key("text").value(warning.text).end_object();
  w.end_array();
  w.key("error");
  if (record.status.is_ok()) {
    w.null();
  } else {
    const ErrorContext& c = record.status.context();
    w.begin_object().key("kind").value(error_code_name(record.status.code()));
    w.key("message").value(record.status.message()).key("rank").value(c.rank).key("peer").value(c.peer);
    w.key("step").value(c.step).end_object();
  }
  w.end_object();
  return w.str();
}

Result<ScenarioRankRecord> parse_rank_record(std::string_view line, std::string_view source) {
  auto bad = [&](const std::string& what) {
    return invalid_argument(fmt::format("{}: rank record: {}", source, what));
  };
  YAML::Node root;
  try {
    root = YAML::Load(std::string(line));  // JSON is YAML's flow style
  } catch (const YAML::Exception& e) {
    return bad(std::string("not JSON: ") + e.what());
  }
  if (!root.IsMap()) return bad("not a JSON object");
  ScenarioRankRecord out;
  try {
    out.rank = root["rank"].as<int>();
    ScenarioRankResult& r = out.result;
    r.started = root["started"].as<bool>();
    if (r.started) {
      auto p = parse_placement(root["placement"].as<std::string>());
      if (!p.is_ok()) return bad("placement: " + p.status().message());
      r.placement = *p;
    }
    if (root["handle_type"] && !root["handle_type"].IsNull()) {
      const std::string h = root["handle_type"].as<std::string>();
      if (h == handle_type_name(HandleType::kPosixFd)) r.handle_type = HandleType::kPosixFd;
      else if (h == handle_type_name(HandleType::kFabric)) r.handle_type = HandleType::kFabric;
      else return bad(fmt::format("handle_type: unknown '{}'", h));
    }
    r.looked_up = root["looked_up"].as<bool>();
    r.lookup_mismatch = root["lookup_mismatch"].as<std::string>();
    for (const YAML::Node& h : root["lookup_hashes"]) {
      const std::string text = h.as<std::string>();
      uint64_t value = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
      if (ec != std::errc() || end != text.data() + text.size()) return bad(fmt::format("lookup_hashes: '{}'", text));
      r.lookup_hashes.push_back(value);
    }
    for (const YAML::Node& w : root["warnings"])
      out.warnings.push_back({w["key"].as<std::string>(), w["text"].as<std::string>()});
    const YAML::Node e = root["error"];
    if (e && !e.IsNull()) {
      auto kind = parse_error_kind(e["kind"].as<std::string>());
      if (!kind.is_ok()) return bad("error.kind: " + kind.status().message());
      out.status = Status(*kind, e["message"].as<std::string>(),
                          {e["rank"].as<int>(), e["peer"].as<int>(), e["step"].as<std::string>()});
    }
  } catch (const YAML::Exception& ex) {
    return bad(std::string("missing or mistyped field: ") + ex.what());
  }
  return out;
}

}  // namespace engram
