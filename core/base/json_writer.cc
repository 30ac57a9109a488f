#include "core/base/json_writer.h"

#include <fmt/format.h>

#include "core/base/status.h"

namespace engram {

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  first_.push_back(true);
  return *this;
}
JsonWriter& JsonWriter::end_object() {
  ENGRAM_CHECK(!first_.empty() && !after_key_);
  first_.pop_back();
  out_ += '}';
  return *this;
}
JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  first_.push_back(true);
  return *this;
}
JsonWriter& JsonWriter::end_array() {
  ENGRAM_CHECK(!first_.empty() && !after_key_);
  first_.pop_back();
  out_ += ']';
  return *this;
}
JsonWriter& JsonWriter::key(std::string_view name) {
  ENGRAM_CHECK(!first_.empty() && !after_key_);
  before_value();
  out_ += quote(name);
  out_ += ':';
  after_key_ = true;
  return *this;
}
JsonWriter& JsonWriter::value(std::string_view text) {
  before_value();
  out_ += quote(text);
  return *this;
}
JsonWriter& JsonWriter::value(int64_t number) {
  before_value();
  out_ += fmt::format("{}", number);
  return *this;
}
JsonWriter& JsonWriter::value(uint64_t number) {
  before_value();
  out_ += fmt::format("{}", number);
  return *this;
}
JsonWriter& JsonWriter::value(bool flag) {
  before_value();
  out_ += flag ? "true" : "false";
  return *this;
}
JsonWriter& JsonWriter::null() {
  before_value();
  out_ += "null";
  return *this;
}

const std::string& JsonWriter::str() const {
  ENGRAM_CHECK(first_.empty() && !after_key_);
  return out_;
}

std::string JsonWriter::quote(std::string_view text) {
  std::string q = "\"";
  for (char ch : text) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': q += "\\\""; break;
      case '\\': q += "\\\\"; break;
      case '\n': q += "\\n"; break;
      case '\t': q += "\\t"; break;
      case '\r': q += "\\r"; break;
      default:
        if (c < 0x20) q += fmt::format("\\u{:04x}", c);
        else q += ch;
    }
  }
  q += '"';
  return q;
}

}  // namespace engram
