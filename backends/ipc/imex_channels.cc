#include "backends/ipc/imex_channels.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace engram::ipc {

std::vector<std::string> imex_channels(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  // An absent or unreadable directory is "no channel", not an error: most
  // machines (every one outside a multi-node NVLink rack) have none.
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return out;
  for (const std::filesystem::directory_iterator end; it != end; it.increment(ec)) {
    if (ec) break;
    std::string name = it->path().filename().string();
    if (name.starts_with("channel")) out.push_back(std::move(name));
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool has_imex_channel(const std::string& dir) { return !imex_channels(dir).empty(); }

}  // namespace engram::ipc
