// A real rank of the real backend (backends/cuda) over whatever libcuda.so.1
// the library path finds: under the emulated driver (backends/emulated_driver,
// LD_LIBRARY_PATH=build/emulated_driver/lib, ENGRAMLAB_EMULATED_WORLD) it runs
// the runtime's handle exchange on an emulated rack without a GPU.
//
//   emulated_rank_worker exchange [--bytes N] [--ranks-per-gpu K]
//       Opens GPU LOCAL_RANK / K through CudaDeviceMemory, its probe through
//       GpuHostProbe (host identity and NVLink domain as the driver and NVML
//       report them), runs exchange_shareable_handles over the real
//       rendezvous and fd channel, fills its shard with the fill rule, and
//       reads every peer's shard through its mapping on the CPU (the mapped
//       device pointer is host memory here), checking every byte. Prints
//       "rank R: handle H, G ranks: EXCHANGE OK" or "rank R: EXCHANGE REFUSED:
//       <status>", then "rank R: NOTHING LEFT" when no emulated memfd is open
//       or mapped in this process any more. Exit 0 when both held (or the
//       refusal was expected: --expect refused). --check-bytes N reads only
//       the first N bytes of each shard.
//   emulated_rank_worker export-fabric [--bytes N]
//       Creates a FABRIC allocation, fills it, prints "HANDLE <128 hex>" and
//       waits for stdin to close (the dead-exporter test kills it instead).
//   emulated_rank_worker import-fabric <128 hex> [--bytes N]
//       Imports, maps and checks the exporter's fill; prints "IMPORT OK" or
//       "IMPORT REFUSED: <status>".
//   emulated_rank_worker trace
//       One VMM sequence on GPU 0 with each step's driver answer, a line each.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_device_memory.h"
#include "backends/cuda/gpu_host_probe.h"
#include "backends/ipc/launch_env.h"
#include "backends/ipc/real_rank_backend.h"
#include "core/exchange/handle_exchange.h"

namespace {

using namespace engram;

// The fill rule: byte i of world rank r's shard.
std::byte fill(int rank, uint64_t i) { return static_cast<std::byte>((rank * 37 + i * 13 + 1) & 0xff); }

// Emulated memory this process still holds: descriptors or mappings of the
// driver's memfds ("engramlab-emu." names).
int emulated_memory_left() {
  int left = 0;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) left += line.find("/memfd:engramlab-emu.") != std::string::npos;
  for (int fd = 0; fd < 4096; ++fd) {
    char link[256] = {};
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    if (::readlink(path.c_str(), link, sizeof link - 1) > 0 && std::strstr(link, "/memfd:engramlab-emu.")) ++left;
  }
  return left;
}

std::string arg(int argc, char** argv, const char* flag, const std::string& otherwise) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return argv[i + 1];
  return otherwise;
}

int exchange(int argc, char** argv) {
  const uint64_t bytes = std::stoull(arg(argc, argv, "--bytes", "3145728"));
  const int ranks_per_gpu = std::stoi(arg(argc, argv, "--ranks-per-gpu", "1"));
  const bool expect_refused = arg(argc, argv, "--expect", "ok") == "refused";
  // The benchmark reads a prefix of each peer's shard (a rack's 72 x 72
  // shards would be the CPU's work, not the exchange's); tests read it all.
  const uint64_t check_bytes = std::stoull(arg(argc, argv, "--check-bytes", "18446744073709551615"));
  auto env = ipc::read_launch_env(ipc::process_env());
  if (!env.is_ok()) {
    std::printf("EXCHANGE SETUP FAILED: %s\n", env.status().to_string().c_str());
    return 2;
  }
  const int rank = env->rank;
  auto options = ipc::real_backend_options(ipc::process_env());
  if (!options.is_ok()) {
    std::printf("rank %d: EXCHANGE SETUP FAILED: %s\n", rank, options.status().to_string().c_str());
    return 2;
  }
  const int ordinal = env->local_rank / ranks_per_gpu;
  bool exchanged = false;
  std::string outcome;
  {
    auto device = cuda::CudaDeviceMemory::open(ordinal);
    if (!device.is_ok()) {
      std::printf("rank %d: EXCHANGE REFUSED: %s\n", rank, device.status().to_string().c_str());
      return 1;
    }
    auto real = ipc::RealRankBackend::create(*env, *options);
    if (!real.is_ok()) {
      std::printf("rank %d: EXCHANGE SETUP FAILED: %s\n", rank, real.status().to_string().c_str());
      return 1;
    }
    RankBackend& backend = (*real)->backend();
    int visible = 0;
    if (const cuda::GpuPresence presence = cuda::gpu_presence(); presence.count > 0) visible = presence.count;
    cuda::GpuHostProbe probe(*backend.probe, ordinal, visible);
    backend.probe = &probe;
    backend.device = device->get();
    auto shared = exchange_shareable_handles(backend, *backend.world, bytes);
    if (!shared.is_ok()) {
      outcome = "EXCHANGE REFUSED: " + shared.status().to_string();
    } else {
      std::vector<std::byte> mine(shared->bytes_per_rank());
      for (uint64_t i = 0; i < mine.size(); ++i) mine[i] = fill(rank, i);
      Status met = backend.device->copy_to_device(shared->local(), mine);
      if (met.is_ok()) met = backend.world->barrier();
      // Every peer's shard, read by the CPU through this process's mapping.
      int wrong = -1;
      for (int p = 0; p < shared->group_size() && met.is_ok() && wrong < 0; ++p) {
        const auto* bytes_at = reinterpret_cast<const std::byte*>(shared->peer(p));
        const int writer = shared->world_rank_of(p);
        for (uint64_t i = 0; i < std::min(shared->bytes_per_rank(), check_bytes); ++i)
          if (bytes_at[i] != fill(writer, i)) {
            wrong = p;
            break;
          }
      }
      const std::string type = handle_type_name(shared->handle_type());
      const int group = shared->group_size();
      Status down = shared->teardown();
      exchanged = met.is_ok() && wrong < 0 && down.is_ok();
      outcome = "handle " + type + ", " + std::to_string(group) + " ranks: " +
                (exchanged ? std::string("EXCHANGE OK")
                           : "EXCHANGE WRONG (" + met.to_string() + ", peer " + std::to_string(wrong) + ", teardown " +
                                 down.to_string() + ")");
    }
  }
  std::printf("rank %d: %s\n", rank, outcome.c_str());
  const int left = emulated_memory_left();
  std::printf("rank %d: %s\n", rank, left == 0 ? "NOTHING LEFT" : ("LEFT BEHIND " + std::to_string(left)).c_str());
  std::fflush(stdout);
  return left == 0 && (exchanged || (expect_refused && outcome.rfind("EXCHANGE REFUSED", 0) == 0)) ? 0 : 1;
}

std::string hex(const ShareableHandle& h) {
  std::string out;
  char two[3];
  for (uint8_t b : h.fabric) {
    std::snprintf(two, sizeof two, "%02x", b);
    out += two;
  }
  return out;
}

int export_fabric(int argc, char** argv) {
  const uint64_t bytes = std::stoull(arg(argc, argv, "--bytes", "2097152"));
  auto device = cuda::CudaDeviceMemory::open(0);
  if (!device.is_ok()) {
    std::printf("EXPORT REFUSED: %s\n", device.status().to_string().c_str());
    return 1;
  }
  DeviceMemory& d = **device;
  auto allocation = d.create(bytes, HandleType::kFabric);
  if (!allocation.is_ok()) {
    std::printf("EXPORT REFUSED: %s\n", allocation.status().to_string().c_str());
    return 1;
  }
  auto range = d.reserve(bytes);
  std::vector<std::byte> mine(bytes);
  for (uint64_t i = 0; i < bytes; ++i) mine[i] = fill(99, i);
  Status wrote = range.is_ok() ? d.map(*range, bytes, *allocation) : range.status();
  if (wrote.is_ok()) wrote = d.set_access(*range, bytes);
  if (wrote.is_ok()) wrote = d.copy_to_device(*range, mine);
  auto handle = wrote.is_ok() ? d.export_handle(*allocation, HandleType::kFabric) : Result<ShareableHandle>(wrote);
  if (!handle.is_ok()) {
    std::printf("EXPORT REFUSED: %s\n", handle.status().to_string().c_str());
    return 1;
  }
  std::printf("HANDLE %s\n", hex(*handle).c_str());
  std::fflush(stdout);
  char c;
  while (::read(0, &c, 1) > 0) {
  }
  return 0;
}

int import_fabric(int argc, char** argv) {
  if (argc < 3 || std::strlen(argv[2]) != 2 * kFabricHandleBytes) {
    std::printf("import-fabric needs the 128 hex digits of a handle\n");
    return 2;
  }
  const uint64_t bytes = std::stoull(arg(argc, argv, "--bytes", "2097152"));
  ShareableHandle handle;
  handle.type = HandleType::kFabric;
  for (size_t i = 0; i < kFabricHandleBytes; ++i)
    handle.fabric[i] = static_cast<uint8_t>(std::stoul(std::string(argv[2] + 2 * i, 2), nullptr, 16));
  int result = 1;
  {
    auto device = cuda::CudaDeviceMemory::open(0);
    if (!device.is_ok()) {
      std::printf("IMPORT REFUSED: %s\n", device.status().to_string().c_str());
      return 1;
    }
    DeviceMemory& d = **device;
    auto imported = d.import_handle(handle);
    if (!imported.is_ok()) {
      std::printf("IMPORT REFUSED: %s\n", imported.status().to_string().c_str());
      result = 3;
    } else {
      auto range = d.reserve(bytes);
      Status met = range.is_ok() ? d.map(*range, bytes, *imported) : range.status();
      if (met.is_ok()) met = d.set_access(*range, bytes);
      bool equal = met.is_ok();
      const auto* at = equal ? reinterpret_cast<const std::byte*>(*range) : nullptr;
      for (uint64_t i = 0; equal && i < bytes; ++i) equal = at[i] == fill(99, i);
      if (met.is_ok()) met = d.unmap(*range, bytes);
      if (range.is_ok()) (void)d.free_reservation(*range, bytes);
      (void)d.release(*imported);
      std::printf("%s\n", equal && met.is_ok() ? "IMPORT OK" : ("IMPORT WRONG: " + met.to_string()).c_str());
      result = equal && met.is_ok() ? 0 : 1;
    }
  }
  std::printf("%s\n", emulated_memory_left() == 0 ? "NOTHING LEFT" : "LEFT BEHIND");
  return result;
}

// The CUDA error name a failed call's status carries, or "ok".
std::string code_of(const Status& s) {
  if (s.is_ok()) return "ok";
  const std::string& m = s.message();
  const size_t at = m.find("CUDA_ERROR_");
  if (at == std::string::npos) return error_code_name(s.code());
  return m.substr(at, m.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ_", at) - at);
}

// One VMM sequence on GPU 0, a line per step with what the driver answered:
// the same lines from the real driver and the emulated one mean they agree
// (tests/gpu/emulated_driver_agreement_test.cc).
int trace() {
  auto opened = cuda::CudaDeviceMemory::open(0);
  if (!opened.is_ok()) {
    std::printf("open: %s\n", opened.status().to_string().c_str());
    return 1;
  }
  cuda::CudaDeviceMemory& d = **opened;
  auto info = d.info();
  if (!info.is_ok()) {
    std::printf("info: %s\n", info.status().to_string().c_str());
    return 1;
  }
  const uint64_t g = info->granularity_bytes;
  std::printf("info: name=%s vmm=%d posix_fd=%d fabric_attribute=%d granularity=%llu\n", info->name.c_str(),
              info->vmm_supported, info->posix_fd_supported, info->fabric_attribute,
              static_cast<unsigned long long>(g));
  std::printf("probe_fabric: %s\n", code_of(d.probe_fabric()).c_str());
  auto fabric = d.create(g, HandleType::kFabric);
  std::printf("create_fabric: %s\n", code_of(fabric.status()).c_str());
  if (fabric.is_ok()) (void)d.release(*fabric);
  // POSIX: create, export, import, map, access, write, read back.
  Status posix = Status::ok();
  auto mine = d.create(g, HandleType::kPosixFd);
  posix = mine.status();
  if (posix.is_ok()) {
    auto handle = d.export_handle(*mine, HandleType::kPosixFd);
    posix = handle.status();
    if (posix.is_ok()) {
      auto imported = d.import_handle(*handle);
      (void)d.close_fd(handle->fd);
      posix = imported.status();
      if (posix.is_ok()) {
        auto range = d.reserve(g);
        posix = range.status();
        if (posix.is_ok()) {
          posix = d.map(*range, g, *imported);
          if (posix.is_ok()) posix = d.set_access(*range, g);
          std::vector<std::byte> out(4096, std::byte{0x5a});
          std::vector<std::byte> back(4096);
          if (posix.is_ok()) posix = d.copy_to_device(*range, out);
          if (posix.is_ok()) posix = d.copy_from_device(back, *range);
          if (posix.is_ok() && back != out) posix = Status(ErrorCode::kInternal, "read back differs");
          (void)d.unmap(*range, g);
          (void)d.free_reservation(*range, g);
        }
        (void)d.release(*imported);
      }
    }
    (void)d.release(*mine);
  }
  std::printf("posix_round_trip: %s\n", code_of(posix).c_str());
  ShareableHandle forged;
  forged.type = HandleType::kFabric;
  for (size_t i = 0; i < forged.fabric.size(); ++i) forged.fabric[i] = static_cast<uint8_t>(i * 31 + 7);
  std::printf("forged_fabric_import: %s\n", code_of(d.import_handle(forged).status()).c_str());
  auto two = d.create(2 * g, HandleType::kPosixFd);
  auto small = d.reserve(g);
  if (two.is_ok() && small.is_ok()) {
    std::printf("map_past_reservation: %s\n", code_of(d.map(*small, 2 * g, *two)).c_str());
    std::printf("access_unmapped: %s\n", code_of(d.set_access(*small, g)).c_str());
  }
  if (small.is_ok()) (void)d.free_reservation(*small, g);
  if (two.is_ok()) {
    (void)d.release(*two);
    std::printf("release_twice: %s\n", code_of(d.release(*two)).c_str());
  }
  const uint64_t past = (info->memory_bytes_total / g + 1) * g;
  auto huge = d.create(past, HandleType::kPosixFd);
  std::printf("create_past_memory: %s\n", code_of(huge.status()).c_str());
  if (huge.is_ok()) (void)d.release(*huge);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "exchange") return exchange(argc, argv);
  if (mode == "export-fabric") return export_fabric(argc, argv);
  if (mode == "import-fabric") return import_fabric(argc, argv);
  if (mode == "trace") return trace();
  std::fprintf(stderr, "usage: emulated_rank_worker exchange|export-fabric|import-fabric ...\n");
  return 2;
}
