// Coverage probes: named counters of rare paths ("cleanup after import
// failure"), after FoundationDB's CODE_PROBE. A fault sweep reads them to
// prove a rare path really ran. The core only names the path; whoever runs it
// (the emulator, on the one thread its rank fibers share) installs a sink.
// With no sink a probe is a no-op, so the real backends pay nothing.
//
// A probe's name is a template argument, never a string built at run time:
//
//   coverage_probe<"sim: shm ENOSPC">();
//
// Each distinct name instantiates one registration object that is
// initialised before main, whether or not the probe is ever reached, so
// registered_coverage_probes() lists every probe linked into the program and
// a sweep can name the probes it never hit. There is no way to hit a name
// that is not registered: the only entry point is the template.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <vector>

namespace engram {

class CoverageSink {
 public:
  virtual ~CoverageSink() = default;
  virtual void hit(std::string_view probe) = 0;
};

// The sink for probes hit on this thread (the emulator's ranks are fibers on
// the one thread that runs the world, so one sink counts every rank's
// probes); returns the previous one. nullptr uninstalls.
CoverageSink* set_thread_coverage_sink(CoverageSink* sink);

// A probe's name as a template argument (a string literal converts to it).
template <size_t N>
struct CoverageProbeName {
  char text[N]{};
  consteval CoverageProbeName(const char (&s)[N]) { std::copy_n(s, N, text); }  // NOLINT: implicit by design
  constexpr std::string_view view() const { return {text, N - 1}; }
};

// Every probe linked into this program, sorted by name, each once.
std::vector<std::string_view> registered_coverage_probes();

namespace coverage_detail {

struct Registration {
  explicit Registration(std::string_view name);
};

void hit(std::string_view name);

// One per distinct name; its static member registers the name at static
// initialisation (the storage of a template parameter object lives as long
// as the program, so the view stays valid).
template <CoverageProbeName Name>
struct Site {
  static_assert(Name.view().size() > 0, "a coverage probe needs a name");
  static_assert(Name.view().find('\0') == std::string_view::npos, "a coverage probe's name is one string");
  static inline const Registration registration{Name.view()};
};

}  // namespace coverage_detail

template <CoverageProbeName Name>
void coverage_probe() {
  // Naming the registration instantiates it, so a probe that never runs is
  // registered all the same.
  static_cast<void>(&coverage_detail::Site<Name>::registration);
  coverage_detail::hit(Name.view());
}

}  // namespace engram
