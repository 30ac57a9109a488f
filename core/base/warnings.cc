#include "core/base/warnings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "core/base/status.h"

namespace engram {

bool WarningSink::emit(const Warning& warning) {
  ENGRAM_CHECK(!warning.key.empty());
  Listener listener;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!keys_.insert(warning.key).second) return false;
    warnings_.push_back(warning);
    listener = on_first_;
  }
  // Outside the lock: a listener may log, and logging may warn again.
  if (listener) listener(warning);
  return true;
}

bool WarningSink::seen(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return keys_.count(key) != 0;
}

std::vector<Warning> WarningSink::warnings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return warnings_;
}

size_t WarningSink::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return warnings_.size();
}

WarningSink& WarningSink::process() {
  static WarningSink sink([](const Warning& w) {
    std::fputs(fmt::format("engramlab warning [{}]: {}\n", w.key, w.text).c_str(), stderr);
  });
  return sink;
}

void append_unique(std::vector<Warning>& list, const Warning& warning) {
  bool present = std::any_of(list.begin(), list.end(),
                             [&](const Warning& w) { return w.key == warning.key; });
  if (!present) list.push_back(warning);
}

}  // namespace engram
