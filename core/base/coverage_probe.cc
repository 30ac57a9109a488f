#include "core/base/coverage_probe.h"

namespace engram {

namespace {
thread_local CoverageSink* t_sink = nullptr;
}

CoverageSink* set_thread_coverage_sink(CoverageSink* sink) {
  CoverageSink* previous = t_sink;
  t_sink = sink;
  return previous;
}

void coverage_probe(std::string_view probe) {
  if (t_sink != nullptr) t_sink->hit(probe);
}

}  // namespace engram
