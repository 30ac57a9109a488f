// Coverage probes: named counters of rare paths ("cleanup after import
// failure"), after FoundationDB's CODE_PROBE. A fault sweep reads them to
// prove a rare path really ran. The core only names the path; whoever runs it
// (the emulator, per rank thread) installs a sink. With no sink a probe is a
// no-op, so the real backends pay nothing.
#pragma once

#include <string_view>

namespace engram {

class CoverageSink {
 public:
  virtual ~CoverageSink() = default;
  virtual void hit(std::string_view probe) = 0;
};

// The sink for probes hit on this thread (each emulated rank runs on its own
// thread); returns the previous one. nullptr uninstalls.
CoverageSink* set_thread_coverage_sink(CoverageSink* sink);
void coverage_probe(std::string_view probe);

}  // namespace engram
