#include "core/base/rerun_command.h"

#include <filesystem>
#include <mutex>
#include <optional>

#include "core/base/shell_quote.h"

namespace engram {
namespace {

std::mutex& rerun_mutex() {
  static std::mutex m;
  return m;
}

std::optional<std::string>& rerun_binary_slot() {
  static std::optional<std::string> path;
  return path;
}

// Whether set_rerun_binary named the binary (else it is /proc/self/exe).
bool& rerun_binary_named() {
  static bool named = false;
  return named;
}

std::string& rerun_test_line_slot() {
  static std::string line;
  return line;
}

}  // namespace

std::string rerun_binary() {
  std::lock_guard<std::mutex> lock(rerun_mutex());
  std::optional<std::string>& path = rerun_binary_slot();
  if (!path) {
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    path = ec || self.empty() ? std::string("engramlab") : self.string();
  }
  return *path;
}

void set_rerun_binary(std::string path) {
  std::lock_guard<std::mutex> lock(rerun_mutex());
  rerun_binary_slot() = std::move(path);
  rerun_binary_named() = true;
}

void set_rerun_test_line(std::string line) {
  std::lock_guard<std::mutex> lock(rerun_mutex());
  rerun_test_line_slot() = std::move(line);
}

std::string rerun_test_line() {
  std::lock_guard<std::mutex> lock(rerun_mutex());
  return rerun_test_line_slot();
}

std::string rerun_command_or_test(const std::vector<std::string>& args) {
  {
    std::lock_guard<std::mutex> lock(rerun_mutex());
    if (!rerun_binary_named() && !rerun_test_line_slot().empty()) return rerun_test_line_slot();
  }
  return rerun_command(args);
}

std::string rerun_command(const std::vector<std::string>& args) {
  std::vector<std::string> words;
  words.reserve(args.size() + 1);
  words.push_back(rerun_binary());
  words.insert(words.end(), args.begin(), args.end());
  return shell_command(words);
}

std::string absolute_file_path(const std::string& path) {
  std::error_code ec;
  if (path.empty() || !std::filesystem::exists(path, ec) || ec) return path;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  return ec ? path : absolute.lexically_normal().string();
}

}  // namespace engram
