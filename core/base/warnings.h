// Warnings that must appear once per process, not once per layer or per call
// (docs/design.md section 3: the fallback warns once per process). A sink
// remembers which keys it has seen; the process-wide sink is what the engine
// path uses, tests inject their own.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace engram {

struct Warning {
  std::string key;   // stable identity, e.g. "dp_shared_memory.fallback.shm_too_small"
  std::string text;  // what the user reads
  bool operator==(const Warning&) const = default;
};

class WarningSink {
 public:
  using Listener = std::function<void(const Warning&)>;

  WarningSink() = default;
  explicit WarningSink(Listener on_first) : on_first_(std::move(on_first)) {}
  WarningSink(const WarningSink&) = delete;
  WarningSink& operator=(const WarningSink&) = delete;

  // Records the warning if its key is new and tells the listener; returns
  // whether it was new. Thread-safe.
  bool emit(const Warning& warning);
  bool seen(const std::string& key) const;
  std::vector<Warning> warnings() const;  // in first-emitted order
  size_t size() const;

  // The one sink of this process. Its listener prints to stderr by default.
  static WarningSink& process();

 private:
  mutable std::mutex mutex_;
  Listener on_first_;
  std::unordered_set<std::string> keys_;
  std::vector<Warning> warnings_;
};

// Appends `warning` to `list` unless a warning with its key is there already.
void append_unique(std::vector<Warning>& list, const Warning& warning);

}  // namespace engram
