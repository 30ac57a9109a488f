#include "harness/scenario_rank_record.h"

#include <fmt/format.h>

#include <charconv>

#include "core/base/json_output.h"

namespace engram::harness {
namespace {

Result<ErrorCode> parse_error_kind(const std::string& text) {
  for (int k = static_cast<int>(ErrorCode::kInvalidArgument); k <= static_cast<int>(ErrorCode::kInternal); ++k)
    if (text == error_code_name(static_cast<ErrorCode>(k))) return static_cast<ErrorCode>(k);
  return invalid_argument(fmt::format("unknown error kind '{}'", text));
}

}  // namespace

std::string format_rank_record(const ScenarioRankRecord& record) {
  const ScenarioRankResult& r = record.result;
  Json j = Json::object();
  j["rank"] = record.rank;
  j["started"] = r.started;
  j["placement"] = r.started ? Json(placement_name(r.placement)) : Json(nullptr);
  j["handle_type"] = r.handle_type ? Json(handle_type_name(*r.handle_type)) : Json(nullptr);
  j["looked_up"] = r.looked_up;
  j["lookup_mismatch"] = r.lookup_mismatch;
  j["ids_checked"] = r.ids_checked;
  j["ids_mismatch"] = r.ids_mismatch;
  j["lookup_hashes"] = Json::array();
  // Strings: JSON readers that hold numbers as doubles lose 64-bit values.
  for (uint64_t h : r.lookup_hashes) j["lookup_hashes"].push_back(fmt::format("{:016x}", h));
  j["warnings"] = warnings_json(record.warnings);
  j["error"] = error_json_or_null(record.status);
  return dump_json(j);
}

Result<ScenarioRankRecord> parse_rank_record(std::string_view line, std::string_view source) {
  auto bad = [&](const std::string& what) {
    return invalid_argument(fmt::format("{}: rank record: {}", source, what));
  };
  Json root;
  try {
    root = Json::parse(line);
  } catch (const Json::exception& e) {
    return bad(std::string("not JSON: ") + e.what());
  }
  if (!root.is_object()) return bad("not a JSON object");
  ScenarioRankRecord out;
  try {
    out.rank = root.at("rank").get<int>();
    ScenarioRankResult& r = out.result;
    r.started = root.at("started").get<bool>();
    if (r.started) {
      auto p = parse_placement(root.at("placement").get<std::string>());
      if (!p.is_ok()) return bad("placement: " + p.status().message());
      r.placement = *p;
    }
    if (const Json& h = root.at("handle_type"); !h.is_null()) {
      const std::string text = h.get<std::string>();
      if (text == handle_type_name(HandleType::kPosixFd)) r.handle_type = HandleType::kPosixFd;
      else if (text == handle_type_name(HandleType::kFabric)) r.handle_type = HandleType::kFabric;
      else return bad(fmt::format("handle_type: unknown '{}'", text));
    }
    r.looked_up = root.at("looked_up").get<bool>();
    r.lookup_mismatch = root.at("lookup_mismatch").get<std::string>();
    r.ids_checked = root.at("ids_checked").get<uint64_t>();
    r.ids_mismatch = root.at("ids_mismatch").get<std::string>();
    for (const Json& h : root.at("lookup_hashes")) {
      const std::string text = h.get<std::string>();
      uint64_t value = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
      if (ec != std::errc() || end != text.data() + text.size()) return bad(fmt::format("lookup_hashes: '{}'", text));
      r.lookup_hashes.push_back(value);
    }
    for (const Json& w : root.at("warnings"))
      out.warnings.push_back({w.at("key").get<std::string>(), w.at("text").get<std::string>()});
    if (const Json& e = root.at("error"); !e.is_null()) {
      auto code = parse_error_kind(e.at("code").get<std::string>());
      if (!code.is_ok()) return bad("error.code: " + code.status().message());
      const Json& rank = e.at("rank");
      const Json& peer = e.at("peer");
      const Json& step = e.at("step");
      out.status = Status(*code, e.at("message").get<std::string>(),
                          {rank.is_null() ? -1 : rank.get<int>(), peer.is_null() ? -1 : peer.get<int>(),
                           step.is_null() ? std::string() : step.get<std::string>()});
    }
  } catch (const Json::exception& ex) {
    return bad(std::string("missing or mistyped field: ") + ex.what());
  }
  return out;
}

}  // namespace engram::harness
