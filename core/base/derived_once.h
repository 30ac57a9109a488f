// What the readers of one shared, immutable value derive from it, made once
// and kept with the value: one object of each type T, made by the first
// reader that asks and handed to the others. The emulator hands all its
// ranks one buffer of gathered bytes (core/backend/collectives.h), so N
// ranks decode it and plan from it once, not N times; the memo lives and
// dies with the value, so nothing is shared beyond the readers of that one
// value (no process-wide cache: two emulated worlds, or a real rank and
// anything else, never meet in one).
//
// Thread-safe. `make` runs under the slot's lock, so it must not wait on
// another reader of the value (the emulator's ranks are fibers on one
// thread: a make that blocked on a collective would deadlock).
#pragma once

#include <memory>
#include <mutex>
#include <type_traits>
#include <typeindex>
#include <typeinfo>
#include <utility>
#include <vector>

namespace engram {

class DerivedOnce {
 public:
  DerivedOnce() = default;
  DerivedOnce(const DerivedOnce&) = delete;
  DerivedOnce& operator=(const DerivedOnce&) = delete;

  // The T the first call made with `make` (a callable returning
  // std::shared_ptr<T>); every later call for the same T returns it and
  // does not call `make`. Const: deriving leaves the value as it was.
  template <typename T, typename Make>
  std::shared_ptr<T> get_or_make(Make&& make) const {
    const std::type_index type(typeid(T));
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [made_type, made] : made_)
      if (made_type == type) return std::static_pointer_cast<T>(made);
    std::shared_ptr<T> made = std::forward<Make>(make)();
    made_.emplace_back(type, std::const_pointer_cast<std::remove_const_t<T>>(made));
    return made;
  }

 private:
  mutable std::mutex mutex_;
  // A handful of types at most (decoded facts, a plan): a list, not a map.
  mutable std::vector<std::pair<std::type_index, std::shared_ptr<void>>> made_;
};

}  // namespace engram
