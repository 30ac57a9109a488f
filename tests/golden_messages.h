// The wording tests check, read from one file (tests/golden/messages.txt,
// `key = text` a line): golden_message("size.no_unit") is the text a message
// must contain. A key the file lacks fails the running test and returns a
// text no message contains.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>
#include <string_view>

namespace engram::testing {

inline const std::map<std::string, std::string, std::less<>>& golden_messages() {
  static const std::map<std::string, std::string, std::less<>> messages = [] {
    std::map<std::string, std::string, std::less<>> read;
    std::ifstream in(std::string(ENGRAM_SOURCE_DIR) + "/tests/golden/messages.txt");
    for (std::string line; std::getline(in, line);) {
      const size_t equals = line.find(" = ");
      if (line.empty() || line[0] == '#' || equals == std::string::npos) continue;
      read.emplace(line.substr(0, equals), line.substr(equals + 3));
    }
    return read;
  }();
  return messages;
}

inline std::string golden_message(std::string_view key) {
  const auto& messages = golden_messages();
  const auto found = messages.find(key);
  if (found != messages.end()) return found->second;
  ADD_FAILURE() << "tests/golden/messages.txt has no message '" << key << "'";
  return "\x01<no golden message " + std::string(key) + ">";
}

}  // namespace engram::testing
