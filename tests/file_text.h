// A file's whole text, for tests that check what a command wrote ("" where
// it cannot be read: the expectation that follows then says what is missing).
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace engram::testing {

inline std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace engram::testing
