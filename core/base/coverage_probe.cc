#include "core/base/coverage_probe.h"

#include <set>

namespace engram {

namespace {
thread_local CoverageSink* t_sink = nullptr;

// Filled at static initialisation (single-threaded), read after it.
std::set<std::string_view>& registry() {
  static std::set<std::string_view> names;
  return names;
}
}  // namespace

CoverageSink* set_thread_coverage_sink(CoverageSink* sink) {
  CoverageSink* previous = t_sink;
  t_sink = sink;
  return previous;
}

std::vector<std::string_view> registered_coverage_probes() {
  return {registry().begin(), registry().end()};
}

namespace coverage_detail {

Registration::Registration(std::string_view name) { registry().insert(name); }

void hit(std::string_view name) {
  if (t_sink != nullptr) t_sink->hit(name);
}

}  // namespace coverage_detail

}  // namespace engram
