#include "harness/crashing_shared_memory.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>

namespace engram::harness {

Result<CrashPoint> parse_crash_point(const std::string& text) {
  CrashPoint point;
  const size_t colon = text.find(':');
  const std::string op = text.substr(0, colon);
  if (op == "shm_create") point.operation = CrashPoint::Operation::kCreate;
  else if (op == "shm_open") point.operation = CrashPoint::Operation::kOpenReadOnly;
  else
    return invalid_argument(fmt::format("crash point '{}': write shm_create:N or shm_open:N (die at the N-th call)",
                                        text));
  if (colon != std::string::npos) {
    const std::string n = text.substr(colon + 1);
    auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), point.occurrence);
    if (ec != std::errc() || end != n.data() + n.size() || point.occurrence < 1)
      return invalid_argument(fmt::format("crash point '{}': N must be a whole number >= 1", text));
  }
  return point;
}

void CrashingSharedMemory::maybe_die(CrashPoint::Operation operation, const std::string& name) {
  int& count = operation == CrashPoint::Operation::kCreate ? creates_ : opens_;
  ++count;
  if (operation != point_.operation || count != point_.occurrence) return;
  std::fprintf(stderr, "pid %d: crash test: SIGKILL at %s #%d (%s)\n", static_cast<int>(::getpid()),
               operation == CrashPoint::Operation::kCreate ? "shm_create" : "shm_open", count, name.c_str());
  std::fflush(stderr);
  ::raise(SIGKILL);
}

Result<std::unique_ptr<ShmMapping>> CrashingSharedMemory::create(const std::string& name, uint64_t bytes) {
  maybe_die(CrashPoint::Operation::kCreate, name);
  return inner_.create(name, bytes);
}

Result<std::unique_ptr<ShmMapping>> CrashingSharedMemory::open_read_only(const std::string& name, uint64_t bytes) {
  maybe_die(CrashPoint::Operation::kOpenReadOnly, name);
  return inner_.open_read_only(name, bytes);
}

}  // namespace engram::harness
