#include "core/base/json_output.h"

namespace engram {

Json json_document(std::string_view command) {
  Json j = Json::object();
  j["schema_version"] = kJsonSchemaVersion;
  j["command"] = std::string(command);
  return j;
}

Json warning_json(const Warning& warning) {
  Json j = Json::object();
  j["key"] = warning.key;
  j["text"] = warning.text;
  return j;
}

Json warnings_json(std::span<const Warning> warnings) {
  Json list = Json::array();
  for (const Warning& w : warnings) list.push_back(warning_json(w));
  return list;
}

Json error_json(const Status& status) {
  ENGRAM_CHECK(!status.is_ok());
  const ErrorContext& c = status.context();
  Json j = Json::object();
  j["code"] = error_code_name(status.code());
  j["message"] = status.message();
  j["rank"] = c.rank >= 0 ? Json(c.rank) : Json(nullptr);
  j["peer"] = c.peer >= 0 ? Json(c.peer) : Json(nullptr);
  j["step"] = c.step.empty() ? Json(nullptr) : Json(c.step);
  return j;
}

Json error_json_or_null(const Status& status) { return status.is_ok() ? Json(nullptr) : error_json(status); }

Json string_or_null(const std::optional<std::string>& text) { return text ? Json(*text) : Json(nullptr); }

std::string dump_json(const Json& document) {
  // replace: a byte sequence that is not UTF-8 becomes U+FFFD instead of
  // throwing, so a file name in Latin-1 cannot break the document.
  return document.dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace);
}

Json error_document(std::string_view command, const Status& status) {
  Json j = json_document(command);
  j["warnings"] = Json::array();
  j["error"] = error_json(status);
  return j;
}

}  // namespace engram
