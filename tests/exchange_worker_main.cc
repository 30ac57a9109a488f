// A real rank that runs the runtime's handle exchange
// (exchange_shareable_handles) on real processes, with host memory standing
// in for the GPU where there is none (backends/memfd): real POSIX fds over the
// real Unix-socket channel, in the socket directory the backend resolves by
// default. Run under `engramlab launch`. Each rank fills its allocation with
// its own pattern, every rank reads every peer's slot back, then tears down and
// checks that nothing is left: no allocation, reservation, mapping or fd.
//
//   exchange_worker [--bytes N] [--bytes-on-rank R:N] [--device memfd|cuda]
//                   [--chunks B,B,...] [--chunks-on-odd B,...] [--span-bytes N]
//                   [--expect-chunks N] [--granularity-on-rank R:N] [--no-posix]
//                   [--allow-unshared] [--weights] [--late-rank R:MS] [--expect ok|refused|unshared]
//
// --chunks: the list form (exchange_shareable_chunks): this rank's chunks,
// odd ranks' from --chunks-on-odd when given; chunk c of rank r is filled
// with (r * 16 + c + 1) & 0xFF and every peer's every chunk is read back.
// --expect-chunks N: every rank expects N chunks from every peer.
// --granularity-on-rank R:N: rank R's memfd device maps at N bytes.
// --no-posix: the memfd device reports no POSIX fd handles; with
// --allow-unshared each rank gets plain memory for its own chunks.
// --weights: the weight-sharing transport (rank r shares 1 + r % 3 named
// tensors of unequal sizes and reads every peer's).
// --late-rank R:MS: rank R reaches the exchange MS ms after the others.
//
// --device cuda (where the CUDA backend is built): real VMM memory on GPU 0
// for every rank, so two processes sharing one GPU exchange real fds.
// --bytes-on-rank R:N: rank R asks for N bytes instead, so the exchange must
// fail on every rank (sizes differ) and leave nothing behind there either.
// Prints "EXCHANGE OK" or "EXCHANGE REFUSED: <status>" per rank, then
// "NOTHING LEFT" when the live counts and the fd count are back to where they
// were; exit 0 only when both held.
#include <dirent.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backends/ipc/launch_env.h"
#include "backends/ipc/real_rank_backend.h"
#include "backends/memfd/memfd_device_memory.h"
#include "core/exchange/handle_exchange.h"
#include "core/exchange/weight_sharing.h"
#include "tests/every_byte_is.h"
#include "tests/open_fd_count.h"
#ifdef ENGRAM_HAVE_CUDA_BACKEND
#include "backends/cuda/cuda_device_memory.h"
#endif

namespace {

using namespace engram;

struct Args {
  uint64_t bytes = 3 << 20;  // not a multiple of 2 MiB: the exchange rounds up
  int odd_rank = -1;
  uint64_t odd_bytes = 0;
  std::string device = "memfd";
  std::vector<uint64_t> chunks, chunks_on_odd;
  uint64_t span_bytes = 0;
  int expect_chunks = -1;
  int granularity_rank = -1;
  uint64_t granularity_bytes = 0;
  bool no_posix = false;
  bool allow_unshared = false;
  bool weights = false;
  int late_rank = -1;
  int late_ms = 0;
  std::string expect = "ok";
};

std::vector<uint64_t> parse_list(const std::string& text) {
  std::vector<uint64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoull(item));
  return out;
}

using testing::open_fd_count;

std::byte pattern(int rank, uint64_t i) { return static_cast<std::byte>((rank * 37 + i * 13 + 1) & 0xff); }

// Every peer's slot reads what that peer wrote; returns the first wrong peer or -1.
int first_wrong_peer(DeviceMemory& device, const SharedMapping& shared, std::vector<std::byte>& buf) {
  for (int p = 0; p < shared.group_size(); ++p) {
    if (!device.copy_from_device(buf, shared.peer(p)).is_ok()) return p;
    const int writer = shared.world_rank_of(p);
    for (uint64_t i = 0; i < buf.size(); i += 4093) {
      if (buf[i] != pattern(writer, i)) return p;
    }
  }
  return -1;
}

std::byte chunk_fill(int rank, int chunk) { return static_cast<std::byte>((rank * 16 + chunk + 1) & 0xFF); }

// The list form: fill own chunks, read every peer's back. Returns the
// outcome word printed for this rank.
std::string exchange_chunks(const Args& args, RankBackend& backend, int rank, bool& exchanged) {
  DeviceMemory& device = *backend.device;
  const std::vector<uint64_t>& chunks = rank % 2 && !args.chunks_on_odd.empty() ? args.chunks_on_odd : args.chunks;
  ChunkExchangeOptions options;
  options.span_bytes_per_peer = args.span_bytes;
  options.allow_unshared = args.allow_unshared;
  if (args.expect_chunks >= 0) options.expected_chunk_counts.assign(static_cast<size_t>(backend.world_size), args.expect_chunks);
  auto shared = exchange_shareable_chunks(backend, *backend.world, chunks, options);
  if (!shared.is_ok()) return "EXCHANGE REFUSED: " + shared.status().to_string();
  const int me = shared->group_rank();
  Status met;
  for (int c = 0; c < shared->chunk_count(me) && met.is_ok(); ++c) {
    std::vector<std::byte> mine(shared->chunk_bytes(me, c), chunk_fill(rank, c));
    met = device.copy_to_device(shared->chunk(me, c), mine);
  }
  if (met.is_ok()) met = backend.world->barrier();
  int wrong = -1;
  for (int p = 0; p < shared->group_size() && met.is_ok() && wrong < 0; ++p) {
    if (!shared->shared() && p != me) continue;
    for (int c = 0; c < shared->chunk_count(p) && wrong < 0; ++c) {
      std::vector<std::byte> got(shared->chunk_bytes(p, c));
      if (!device.copy_from_device(got, shared->chunk(p, c)).is_ok()) wrong = p;
      if (!testing::every_byte_is(got, chunk_fill(shared->world_rank_of(p), c))) wrong = p;
    }
  }
  std::string counts;
  for (int p = 0; p < shared->group_size(); ++p) counts += (p ? "," : "") + std::to_string(shared->chunk_count(p));
  const bool was_shared = shared->shared();
  const std::string reason = shared->unshared_reason().to_string();
  const std::string type = handle_type_name(shared->handle_type());
  Status down = shared->teardown();
  exchanged = met.is_ok() && wrong == -1 && down.is_ok();
  const std::string word = !exchanged ? "EXCHANGE WRONG (" + met.to_string() + ", peer " + std::to_string(wrong) +
                                            ", teardown " + down.to_string() + ")"
                           : was_shared ? "EXCHANGE OK"
                                        : "UNSHARED OK (" + reason + ")";
  return "handle " + type + ", chunks per rank " + counts + ": " + word;
}

// The weight-sharing transport: rank r shares 1 + r % 3 tensors.
std::string share_weights(RankBackend& backend, int rank, bool& exchanged) {
  auto tensors_of = [](int r) {
    std::vector<TensorSpec> out;
    for (int l = 0; l < 1 + r % 3; ++l)
      out.push_back({"layer" + std::to_string(l) + ".w", static_cast<uint64_t>(r + 1) * 100'000 + l * 4096});
    return out;
  };
  auto pattern = [](int r, size_t t, size_t i) { return static_cast<std::byte>((r * 31 + t * 7 + i) & 0xFF); };
  const std::vector<TensorSpec> mine = tensors_of(rank);
  auto shared = WeightSharing::create(backend, *backend.world, mine);
  if (!shared.is_ok()) return "WEIGHTS REFUSED: " + shared.status().to_string();
  Status met;
  for (size_t t = 0; t < mine.size() && met.is_ok(); ++t) {
    std::vector<std::byte> bytes(mine[t].bytes);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = pattern(rank, t, i);
    met = shared->write(mine[t].name, bytes);
  }
  if (met.is_ok()) met = backend.world->barrier();
  int wrong = -1;
  for (int p = 0; p < shared->group_size() && met.is_ok() && wrong < 0; ++p) {
    const std::vector<TensorSpec> theirs = tensors_of(p);
    for (size_t t = 0; t < theirs.size() && wrong < 0; ++t) {
      std::vector<std::byte> got(theirs[t].bytes);
      if (!shared->read(p, theirs[t].name, got).is_ok()) wrong = p;
      for (size_t i = 0; i < got.size() && wrong < 0; ++i)
        if (got[i] != pattern(p, t, i)) wrong = p;
    }
  }
  Status down = shared->teardown();
  exchanged = met.is_ok() && wrong == -1 && down.is_ok();
  return exchanged ? "WEIGHTS OK"
                   : "WEIGHTS WRONG (" + met.to_string() + ", peer " + std::to_string(wrong) + ", teardown " +
                         down.to_string() + ")";
}

int run(const Args& args) {
  auto env = ipc::read_launch_env(ipc::process_env());
  if (!env.is_ok()) {
    std::fprintf(stderr, "exchange_worker: %s\n", env.status().to_string().c_str());
    return 2;
  }
  const int rank = env->rank;
  auto options = ipc::real_backend_options(ipc::process_env());
  if (!options.is_ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, options.status().to_string().c_str());
    return 2;
  }
  memfd::MemfdDeviceMemory memfd_device(
      rank == args.granularity_rank ? args.granularity_bytes : memfd::MemfdDeviceMemory::kDefaultGranularityBytes,
      !args.no_posix);
  DeviceMemory* device_memory = &memfd_device;
#ifdef ENGRAM_HAVE_CUDA_BACKEND
  std::unique_ptr<cuda::CudaDeviceMemory> gpu;
  if (args.device == "cuda") {
    auto opened = cuda::CudaDeviceMemory::open(0);
    if (!opened.is_ok()) {
      std::printf("rank %d: FAILED: %s\n", rank, opened.status().to_string().c_str());
      return 1;
    }
    gpu = std::move(opened).value();
    device_memory = gpu.get();
  }
#endif
  if (args.device != "memfd" && device_memory == &memfd_device) {
    std::fprintf(stderr, "exchange_worker: --device %s is not built here (memfd, or cuda with the CUDA backend)\n",
                 args.device.c_str());
    return 2;
  }
  const int fds_with_device = open_fd_count();
  DeviceMemory& device = *device_memory;
  bool exchanged = false;
  {
    auto real = ipc::RealRankBackend::create(*env, *options);
    if (!real.is_ok()) {
      std::printf("rank %d: FAILED: %s\n", rank, real.status().to_string().c_str());
      return 1;
    }
    RankBackend& backend = (*real)->backend();
    backend.device = &device;
    const int fds_with_backend = open_fd_count();
    if (rank == args.late_rank) std::this_thread::sleep_for(std::chrono::milliseconds(args.late_ms));
    const uint64_t bytes = rank == args.odd_rank ? args.odd_bytes : args.bytes;
    auto shared = args.chunks.empty() && !args.weights ? exchange_shareable_handles(backend, *backend.world, bytes)
                                                       : Result<SharedMapping>(SharedMapping());
    if (args.weights || !args.chunks.empty()) {
      const std::string word = args.weights ? share_weights(backend, rank, exchanged)
                                            : exchange_chunks(args, backend, rank, exchanged);
      std::printf("rank %d: %s\n", rank, word.c_str());
    } else if (!shared.is_ok()) {
      std::printf("rank %d: EXCHANGE REFUSED: %s\n", rank, shared.status().to_string().c_str());
    } else {
      std::vector<std::byte> mine(shared->bytes_per_rank());
      for (uint64_t i = 0; i < mine.size(); ++i) mine[i] = pattern(rank, i);
      Status wrote = device.copy_to_device(shared->local(), mine);
      Status met = wrote.is_ok() ? backend.world->barrier() : wrote;
      std::vector<std::byte> buf(shared->bytes_per_rank());
      const int wrong = met.is_ok() ? first_wrong_peer(device, *shared, buf) : -2;
      Status down = shared->teardown();
      exchanged = met.is_ok() && wrong == -1 && down.is_ok();
      std::printf("rank %d: handle %s, %d ranks, %llu bytes each, socket dir %s: %s\n", rank,
                  handle_type_name(shared->handle_type()), shared->group_size(),
                  static_cast<unsigned long long>(shared->bytes_per_rank()), options->socket_dir.empty() ? "default" : "set",
                  exchanged ? "EXCHANGE OK"
                            : ("EXCHANGE WRONG (" + met.to_string() + ", peer " + std::to_string(wrong) + ", teardown " +
                               down.to_string() + ")")
                                  .c_str());
    }
    // Only the backend's own fds (sockets, epoll) may remain before it goes.
    const int fds_after = open_fd_count();
    if (fds_after != fds_with_backend) {
      std::printf("rank %d: %d fds open after the exchange, %d before it\n", rank, fds_after, fds_with_backend);
      return 1;
    }
  }
  const memfd::MemfdLiveCounts live = memfd_device.live_counts();
  const bool nothing_left = live == memfd::MemfdLiveCounts{} && open_fd_count() == fds_with_device;
  std::printf("rank %d: %s (allocations %d, reservations %d, mappings %d, fds %d -> %d)\n", rank,
              nothing_left ? "NOTHING LEFT" : "LEFT BEHIND", live.allocations, live.reservations, live.mappings,
              fds_with_device, open_fd_count());
  std::fflush(stdout);
  const bool refused_as_asked = (args.odd_rank >= 0 || args.expect == "refused") && !exchanged;
  return nothing_left && (exchanged || refused_as_asked) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  // Switches first (no value), so the flag/value pairs below stay pairs.
  std::vector<char*> pairs = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--no-posix") args.no_posix = true;
    else if (flag == "--allow-unshared") args.allow_unshared = true;
    else if (flag == "--weights") args.weights = true;
    else pairs.push_back(argv[i]);
  }
  argc = static_cast<int>(pairs.size());
  argv = pairs.data();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--bytes") {
      args.bytes = std::stoull(value);
    } else if (flag == "--device") {
      args.device = value;
    } else if (flag == "--chunks") {
      args.chunks = parse_list(value);
    } else if (flag == "--chunks-on-odd") {
      args.chunks_on_odd = parse_list(value);
    } else if (flag == "--span-bytes") {
      args.span_bytes = std::stoull(value);
    } else if (flag == "--expect-chunks") {
      args.expect_chunks = std::stoi(value);
    } else if (flag == "--expect") {
      args.expect = value;
    } else if (flag == "--granularity-on-rank" && value.find(':') != std::string::npos) {
      args.granularity_rank = std::stoi(value.substr(0, value.find(':')));
      args.granularity_bytes = std::stoull(value.substr(value.find(':') + 1));
    } else if (flag == "--late-rank" && value.find(':') != std::string::npos) {
      args.late_rank = std::stoi(value.substr(0, value.find(':')));
      args.late_ms = std::stoi(value.substr(value.find(':') + 1));
    } else if (flag == "--bytes-on-rank" && value.find(':') != std::string::npos) {
      args.odd_rank = std::stoi(value.substr(0, value.find(':')));
      args.odd_bytes = std::stoull(value.substr(value.find(':') + 1));
    } else {
      std::fprintf(stderr, "exchange_worker: unknown flag %s %s\n", flag.c_str(), value.c_str());
      return 2;
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "exchange_worker: %s needs a value\n", argv[argc - 1]);
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return run(args);
}
