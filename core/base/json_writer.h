// A minimal JSON writer for machine-readable command output (no new
// dependency): objects, arrays, strings, numbers, booleans, null.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace engram {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view name);  // inside an object, before each value
  JsonWriter& value(std::string_view text);
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(int64_t number);
  JsonWriter& value(uint64_t number);
  JsonWriter& value(int number) { return value(static_cast<int64_t>(number)); }
  JsonWriter& value(bool flag);
  JsonWriter& null();

  // The document; every object and array must be closed.
  const std::string& str() const;

  static std::string quote(std::string_view text);

 private:
  void before_value();
  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace engram
