// Where a host table's fill goes on this machine (a probe, not a test):
// prints one table. A /dev/shm segment of the size asked (a real tmpfs
// file, as host_shared's), filled with the rows of the one-layer V4.1 table
// by `threads` threads, each way once on a fresh segment:
//   populate only   every page faulted in writable, nothing written: the
//                   kernel's share (allocate and zero 4 KiB or huge pages)
//   rewrite         the rows written again over populated pages: the
//                   stores' and the row code's own ceiling
//   fault on write  the rows written into untouched pages, a fault a page
//                   (fill_table_rows_parallel, as host tables fill)
//   populate first  each thread's part populated in one madvise
//                   (MADV_POPULATE_WRITE), then written: the alternative,
//                   slower on the H200 machine's 16 threads (perf_notes)
// Usage: host_fill_probe [GiB (8)] [threads (all cores, at most 32)].
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/base/elapsed.h"
#include "core/model/table_fill.h"
#include "core/model/table_spec.h"

namespace {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14's value, for headers older than the kernel
#endif

// Every page of `bytes` faulted in writable in one call; false where the
// kernel cannot.
bool populate_for_write(std::span<std::byte> bytes) {
  if (bytes.empty()) return true;
  static const uintptr_t page_bytes = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(bytes.data()) & ~(page_bytes - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(bytes.data()) + bytes.size();
  return ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0;
}

// A fresh tmpfs file of `bytes`, mapped shared and writable; unlinked at once
// so nothing outlives the probe.
struct Segment {
  explicit Segment(size_t bytes_in) : bytes(bytes_in) {
    const std::string name = "/engramlab-host-fill-probe-" + std::to_string(::getpid());
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return;
    ::shm_unlink(name.c_str());
    if (::ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) at = static_cast<std::byte*>(p);
    }
    ::close(fd);
  }
  ~Segment() {
    if (at != nullptr) ::munmap(at, bytes);
  }
  std::span<std::byte> span() const { return {at, bytes}; }
  size_t bytes;
  std::byte* at = nullptr;
};

// Each thread's part of `bytes` (whole rows of row_bytes) populated, then
// filled with rows when `table` is given.
void populate_parallel(std::span<std::byte> bytes, int threads, const engram::TableSpec* table) {
  std::vector<std::thread> pool;
  std::atomic<bool> all{true};
  const size_t rows = table != nullptr ? bytes.size() / table->row_bytes() : 0;
  for (int t = 0; t < threads; ++t) {
    const size_t begin = bytes.size() * static_cast<size_t>(t) / static_cast<size_t>(threads);
    const size_t end = bytes.size() * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
    pool.emplace_back([bytes, begin, end, &all, table, rows, t, threads] {
      if (!populate_for_write(bytes.subspan(begin, end - begin))) all = false;
      if (table == nullptr) return;
      const size_t row_begin = rows * static_cast<size_t>(t) / static_cast<size_t>(threads);
      const size_t row_end = rows * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
      engram::fill_table_rows(*table, 1, static_cast<int64_t>(row_begin),
                              bytes.subspan(row_begin * table->row_bytes(), (row_end - row_begin) * table->row_bytes()));
    });
  }
  for (std::thread& t : pool) t.join();
  if (!all) std::fprintf(stderr, "host_fill_probe: MADV_POPULATE_WRITE refused here: 'populate' rows fault instead\n");
}

}  // namespace

int main(int argc, char** argv) {
  const double gib = argc > 1 ? std::atof(argv[1]) : 8.0;
  const int threads = argc > 2 ? std::atoi(argv[2])
                               : static_cast<int>(std::min(32u, std::max(1u, std::thread::hardware_concurrency())));
  auto model = engram::model_preset("deepseek-v4.1-flash-layer1");
  if (!model.is_ok() || gib <= 0 || threads < 1) {
    std::fprintf(stderr, "usage: host_fill_probe [GiB > 0] [threads >= 1]\n");
    return 2;
  }
  const engram::TableSpec& table = model->tables[0];
  const uint64_t row_bytes = table.row_bytes();
  const size_t rows = std::min<size_t>(static_cast<size_t>(gib * (1ull << 30)) / row_bytes,
                                       static_cast<size_t>(table.row_count()));
  const size_t bytes = rows * row_bytes;
  std::printf("host_fill_probe: %.2f GiB of %s layer %d rows (%llu B each) in /dev/shm, %d threads\n\n",
              static_cast<double>(bytes) / (1ull << 30), model->name.c_str(), table.layer_id,
              static_cast<unsigned long long>(row_bytes), threads);
  std::printf("| way | s | GB/s |\n| --- | ---: | ---: |\n");
  auto row = [&](const char* way, double s) {
    std::printf("| %s | %.2f | %.2f |\n", way, s, static_cast<double>(bytes) / s / 1e9);
  };
  {
    Segment segment(bytes);
    if (segment.at == nullptr) {
      std::fprintf(stderr, "host_fill_probe: no %zu-byte segment in /dev/shm\n", bytes);
      return 1;
    }
    auto start = std::chrono::steady_clock::now();
    populate_parallel(segment.span(), threads, nullptr);
    row("populate only", engram::seconds_since(start));
    start = std::chrono::steady_clock::now();
    engram::fill_table_rows_parallel(table, 1, 0, segment.span(), threads);
    row("rewrite", engram::seconds_since(start));
  }
  for (const bool populate : {false, true}) {
    Segment segment(bytes);
    if (segment.at == nullptr) return 1;
    const auto start = std::chrono::steady_clock::now();
    if (populate) populate_parallel(segment.span(), threads, &table);
    else engram::fill_table_rows_parallel(table, 1, 0, segment.span(), threads);
    row(populate ? "populate first" : "fault on write", engram::seconds_since(start));
  }
  return 0;
}
