// A directory made for one test (mkdtemp under /tmp or /dev/shm) and removed
// with everything in it when the test's scope ends, however it ends: an
// ASSERT that returns early leaves nothing behind either.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace engram::testing {

class TempDir {
 public:
  // `prefix`: "/tmp/engramlab-relay" gives /tmp/engramlab-relay-XXXXXX.
  explicit TempDir(const std::string& prefix = "/tmp/engramlab-test") {
    std::string templ = prefix + "-XXXXXX";
    if (::mkdtemp(templ.data()) != nullptr) path = templ;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path.empty()) std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path;  // empty when mkdtemp failed
};

}  // namespace engram::testing
