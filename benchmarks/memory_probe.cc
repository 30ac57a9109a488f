// What this machine charges for the memory the emulator touches, apart from
// anything the emulator does (a probe, not a test): prints two tables.
//   1. First touch of fresh anonymous memory, 2 MiB (THP) and 4 KiB pages,
//      each size several times over: the kernel zeroes every page, and on a
//      VM the host may not yet back it, which makes the same touch several
//      times slower in one run than the next.
//   2. Dependent loads at random over a working set (a pointer chase): what
//      a cache or TLB miss costs as the set grows from MiBs to the size of a
//      9,216-rank emulated start.
// Usage: memory_probe [--max-mib N] (default 1024).
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// GB/s of touching `bytes` of fresh memory, one write a 4 KiB page.
double first_touch_gb_per_s(size_t bytes, bool huge) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 0;
  ::madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  auto* bytes_at = static_cast<volatile char*>(p);
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < bytes; i += 4096) bytes_at[i] = 1;
  const double s = seconds_since(start);
  ::munmap(p, bytes);
  return static_cast<double>(bytes) / s / 1e9;
}

// Nanoseconds per load of a random cyclic chase over `bytes`.
double dependent_load_ns(size_t bytes) {
  const size_t n = bytes / sizeof(size_t);
  std::vector<size_t> order(n), next(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::shuffle(order.begin(), order.end(), std::mt19937_64(1));
  for (size_t i = 0; i < n; ++i) next[order[i]] = order[(i + 1) % n];
  constexpr size_t kLoads = 10'000'000;
  size_t at = order[0];
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < kLoads; ++i) at = next[at];
  const double s = seconds_since(start);
  if (at == n) std::printf("unreachable\n");  // keeps the chase from being optimised away
  return s * 1e9 / kLoads;
}

}  // namespace

int main(int argc, char** argv) {
  size_t max_mib = 1024;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--max-mib") == 0) max_mib = std::strtoull(argv[i + 1], nullptr, 10);

  std::printf("1. first touch of fresh memory, GB/s (three tries each)\n");
  std::printf("%8s %26s %26s\n", "MiB", "2 MiB pages", "4 KiB pages");
  for (size_t mib = 64; mib <= max_mib; mib *= 4) {
    std::printf("%8zu", mib);
    for (bool huge : {true, false}) {
      char cell[64];
      int used = 0;
      for (int k = 0; k < 3; ++k)
        used += std::snprintf(cell + used, sizeof cell - static_cast<size_t>(used), " %7.2f",
                              first_touch_gb_per_s(mib << 20, huge));
      std::printf(" %26s", cell);
    }
    std::printf("\n");
  }

  std::printf("\n2. dependent random loads over a working set\n");
  std::printf("%8s %12s\n", "MiB", "ns_per_load");
  for (size_t mib = 1; mib <= max_mib; mib *= 2) std::printf("%8zu %12.1f\n", mib, dependent_load_ns(mib << 20));
  return 0;
}
