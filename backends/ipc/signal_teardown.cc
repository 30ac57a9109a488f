#include "backends/ipc/signal_teardown.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

namespace engram::ipc {
namespace {

// A fixed table, so the handler reads it without allocating or locking. A
// rank registers a few entries (its segments, its socket, two directories).
constexpr int kSlots = 256;
enum SlotState : int { kFree = 0, kWriting = 1, kReady = 2 };

struct Slot {
  std::atomic<int> state{kFree};
  TeardownKind kind = TeardownKind::kFile;
  char path[PATH_MAX] = {};
};
Slot g_slots[kSlots];

// A marked directory (its marker's path given): the marker out, the
// directory removed if that left it empty, else the marker back. Without the
// last step a directory shared with another job would lose its marker and
// outlive them all. Only async-signal-safe calls, no allocation.
void remove_marked_directory(const char* marker) {
  char dir[PATH_MAX];
  const size_t n = std::strlen(marker);
  std::memcpy(dir, marker, n + 1);
  char* slash = std::strrchr(dir, '/');
  if (slash == nullptr || slash == dir) return;
  *slash = '\0';
  if (::unlink(marker) != 0) return;  // not there (gone already, or never ours): nothing to decide
  if (::rmdir(dir) == 0 || errno == ENOENT) return;
  const int fd = ::open(marker, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
}

void remove_registered_paths() {
  for (Slot& slot : g_slots)
    if (slot.state.load(std::memory_order_acquire) == kReady && slot.kind == TeardownKind::kFile) ::unlink(slot.path);
  // Deepest first is not known here: a parent's rmdir fails while a child is
  // there, so a few passes take nested ones in any order.
  for (int pass = 0; pass < 4; ++pass) {
    for (Slot& slot : g_slots) {
      if (slot.state.load(std::memory_order_acquire) == kReady && slot.kind == TeardownKind::kMarkedDirectory)
        remove_marked_directory(slot.path);
    }
  }
}

void on_termination_signal(int sig) {
  const int saved = errno;
  remove_registered_paths();
  // Die of the signal, as without the handler: it is blocked until we return.
  struct sigaction fallback{};
  fallback.sa_handler = SIG_DFL;
  ::sigaction(sig, &fallback, nullptr);
  ::raise(sig);
  errno = saved;
}

}  // namespace

TeardownPath::TeardownPath(const std::string& path, TeardownKind kind) {
  if (path.empty() || path.size() >= PATH_MAX) return;
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kWriting, std::memory_order_acq_rel)) continue;
    g_slots[i].kind = kind;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(kReady, std::memory_order_release);
    slot_ = i;
    return;
  }
}

TeardownPath::~TeardownPath() {
  if (slot_ >= 0) g_slots[slot_].state.store(kFree, std::memory_order_release);
}

TeardownPath::TeardownPath(TeardownPath&& other) noexcept : slot_(std::exchange(other.slot_, -1)) {}

TeardownPath& TeardownPath::operator=(TeardownPath&& other) noexcept {
  if (this != &other) {
    if (slot_ >= 0) g_slots[slot_].state.store(kFree, std::memory_order_release);
    slot_ = std::exchange(other.slot_, -1);
  }
  return *this;
}

void tear_down_on_termination_signals() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
      struct sigaction current{};
      if (::sigaction(sig, nullptr, &current) != 0) continue;
      if (current.sa_handler != SIG_DFL) continue;  // ignored, or someone's own handler
      struct sigaction action{};
      action.sa_handler = on_termination_signal;
      sigfillset(&action.sa_mask);  // no second signal mid-teardown
      ::sigaction(sig, &action, nullptr);
    }
  });
}

}  // namespace engram::ipc
