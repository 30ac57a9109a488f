// A real rank for multi-process tests and demos. Run under `engramlab launch`
// (or torchrun/srun): joins the rendezvous, all-gathers host identities,
// shares one /dev/shm segment (rank 0 writes, the others map it read-only and
// verify the bytes), passes a memfd around a ring, checks the collectives,
// and prints one line per result. Exit status 0 only when every check passed.
//
//   host_worker [--shm-dir D] [--socket-dir D] [--bytes N] [--op-timeout-ms T]
//               [--kill-rank R] [--fd-to-rank R] [--hold-agent-port 1]
//
// --hold-agent-port 1: rank 0 first listens on MASTER_ADDR:MASTER_PORT itself
// and keeps it, as torchrun's agent does with its store, to prove the ranks
// meet elsewhere.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backends/ipc/fd_limit.h"
#include "backends/ipc/launch_env.h"
#include "backends/ipc/proc_host_probe.h"
#include "backends/ipc/signal_teardown.h"
#include "backends/ipc/tcp_collectives.h"
#include "backends/ipc/unix_fd_channel.h"
#include "backends/shm/posix_shared_memory.h"
#include "backends/shm/stale_segments.h"
#include "core/backend/collectives.h"
#include "core/base/bf16.h"

namespace {

using namespace engram;

struct Args {
  std::string shm_dir = "/dev/shm";
  std::string socket_dir;
  uint64_t bytes = 1 << 20;
  int op_timeout_ms = 5000;
  int kill_rank = -1;    // this rank SIGKILLs itself halfway through filling/verifying the table
  int fd_to_rank = -1;   // only send one fd from rank 0 to this rank (cross-host test)
  bool hold_agent_port = false;
};

// Listens on MASTER_ADDR:MASTER_PORT, as torchrun's agent store does; the fd
// stays open until the process ends. -1 when it could not.
int hold_agent_port() {
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  if (addr == nullptr || port == nullptr) return -1;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::atoi(port)));
  if (fd < 0 || ::inet_pton(AF_INET, addr, &sa.sin_addr) != 1 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || ::listen(fd, 16) != 0) {
    return -1;
  }
  return fd;
}

int g_rank = -1;
int fail(const Status& s) {
  std::fprintf(stderr, "rank %d: FAILED: %s\n", g_rank, s.to_string().c_str());
  return 1;
}

std::byte pattern_byte(uint64_t i) { return static_cast<std::byte>((i * 131 + 7) & 0xff); }

uint64_t checksum(std::span<const std::byte> bytes) {
  uint64_t h = 1469598103934665603ull;
  for (std::byte b : bytes) h = (h ^ static_cast<uint64_t>(b)) * 1099511628211ull;
  return h;
}

void die_here(const char* where) {
  std::fprintf(stderr, "rank %d: killing myself with SIGKILL %s\n", g_rank, where);
  std::fflush(stderr);
  ::raise(SIGKILL);
}

int run(const Args& args) {
  auto env = ipc::read_launch_env(ipc::process_env());
  if (!env.is_ok()) return fail(env.status());
  g_rank = env->rank;
  const int rank = env->rank;
  const int n = env->world_size;
  std::printf("rank %d: launcher %s, job %s, rendezvous %s\n", rank, env->launcher.c_str(), env->job_id.c_str(),
              env->rendezvous_source.c_str());
  if (args.hold_agent_port && rank == 0) {
    if (hold_agent_port() < 0) return fail(internal_error("cannot hold MASTER_ADDR:MASTER_PORT as the agent would"));
    std::printf("rank 0: holding MASTER_PORT=%s as torchrun's agent does\n", std::getenv("MASTER_PORT"));
  }

  // The fd channel listens before the first collective, so every peer's
  // socket exists once the rendezvous completes.
  ipc::FdChannelOptions fd_options{.rank = rank, .world_size = n, .job_id = env->job_id, .job_token = env->job_token,
                                   .socket_dir = args.socket_dir};
  fd_options.deadline = std::chrono::milliseconds(args.op_timeout_ms);
  auto fds = ipc::UnixFdChannel::open(fd_options);
  if (!fds.is_ok()) return fail(fds.status());

  auto options = ipc::collectives_options(*env);
  options.join_timeout = std::chrono::milliseconds(args.op_timeout_ms * 2);
  options.op_timeout = std::chrono::milliseconds(args.op_timeout_ms);
  auto world = ipc::TcpCollectives::join(options);
  if (!world.is_ok()) return fail(world.status());
  Collectives& coll = **world;

  // Host identities, fixed-size records.
  auto id = ipc::read_host_identity();
  if (!id.is_ok()) return fail(id.status());
  std::array<char, 128> mine{};
  std::snprintf(mine.data(), mine.size(), "%s|%s", id->hostname.c_str(), id->boot_id.c_str());
  std::vector<char> ids(mine.size() * static_cast<size_t>(n));
  if (auto s = coll.all_gather(std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(ids))); !s.is_ok()) return fail(s);
  bool same_host = true;
  std::vector<HostIdentity> hosts;
  for (int r = 0; r < n; ++r) {
    const std::string other(ids.data() + static_cast<size_t>(r) * mine.size());
    std::printf("rank %d: host of rank %d is %s\n", rank, r, other.c_str());
    same_host = same_host && other == std::string(mine.data());
    const size_t bar = other.find('|');
    hosts.push_back({other.substr(0, bar), bar == std::string::npos ? "" : other.substr(bar + 1)});
  }
  // As RealRankBackend does: the channel's errors then say whether a peer shares this host.
  (*fds)->set_peer_hosts(std::move(hosts));
  std::printf("rank %d: all ranks on one host: %s\n", rank, same_host ? "yes" : "no");

  if (args.fd_to_rank >= 0) {
    // Cross-host probe: rank 0 tries to hand a memfd to the named rank.
    if (rank == 0) {
      const int memfd = ::memfd_create("engramlab-probe", MFD_CLOEXEC);
      const Status s = (*fds)->send_fd(args.fd_to_rank, memfd, {});
      ::close(memfd);
      std::printf("rank 0: send_fd to rank %d: %s\n", args.fd_to_rank, s.to_string().c_str());
    } else if (rank == args.fd_to_rank) {
      auto got = (*fds)->recv_fd(0);
      if (got.is_ok()) ::close(got->fd);
      std::printf("rank %d: recv_fd from rank 0: %s\n", rank, got.is_ok() ? "ok" : got.status().to_string().c_str());
    }
    std::fflush(stdout);
    return 0;
  }

  // One shared table: rank 0 creates and fills, the others map read-only.
  shm::PosixSharedMemory memory({.root_dir = args.shm_dir});
  const std::string name = shm::segment_name(env->job_id, env->shm_name_part, "layer0");
  std::unique_ptr<ShmMapping> mapping;
  // Rank 0 owns the segment: if this rank fails after creating it, the
  // job is over and the segment goes with it.
  struct Unlinker {
    shm::PosixSharedMemory& memory;
    const std::string& name;
    bool armed = false;
    ~Unlinker() { if (armed) memory.unlink(name).ignore(); }
  } owner{memory, name};
  if (rank == 0) {
    auto created = memory.create(name, args.bytes);
    if (!created.is_ok() && created.status().code() == ErrorCode::kAlreadyExists) {
      std::printf("rank 0: found a leftover segment: %s\n", created.status().to_string().c_str());
      auto removed = shm::remove_stale_segments(args.shm_dir, shm::SegmentScope::of_job(env->job_id));
      if (!removed.is_ok()) return fail(removed.status());
      for (const auto& r : *removed) std::printf("rank 0: removed stale segment %s\n", r.describe().c_str());
      created = memory.create(name, args.bytes);
    }
    if (!created.is_ok()) return fail(created.status());
    mapping = std::move(created).value();
    owner.armed = true;
    auto out = mapping->bytes();
    for (uint64_t i = 0; i < out.size(); ++i) {
      out[i] = pattern_byte(i);
      if (rank == args.kill_rank && i == out.size() / 2) die_here("mid-load, halfway through filling the table");
    }
  }
  if (auto s = coll.barrier(); !s.is_ok()) return fail(s);
  if (rank != 0) {
    auto opened = memory.open_read_only(name, args.bytes);
    if (!opened.is_ok()) return fail(opened.status());
    mapping = std::move(opened).value();
  }
  // Every reader has mapped before the reader dies: a slow reader would
  // otherwise meet the writer's segment already released (the writer fails
  // its next collective and unlinks) and fail with not_found at "shm map",
  // not unavailable naming the dead peer.
  if (args.kill_rank > 0) {
    if (auto s = coll.barrier(); !s.is_ok()) return fail(s);
    if (rank == args.kill_rank) die_here("mid-load, after mapping the table");
  }
  const uint64_t sum = checksum(mapping->data());
  bool bytes_ok = true;
  for (uint64_t i = 0; i < mapping->data().size(); ++i) bytes_ok = bytes_ok && mapping->data()[i] == pattern_byte(i);
  std::vector<uint64_t> sums(static_cast<size_t>(n));
  if (auto s = coll.all_gather(std::as_bytes(std::span(&sum, 1)), std::as_writable_bytes(std::span(sums))); !s.is_ok()) return fail(s);
  bool sums_equal = true;
  for (uint64_t other : sums) sums_equal = sums_equal && other == sums[0];
  std::printf("rank %d: shm segment %s: %llu bytes, checksum %016llx, pattern %s, identical on all ranks: %s\n", rank,
              name.c_str(), static_cast<unsigned long long>(args.bytes), static_cast<unsigned long long>(sum),
              bytes_ok ? "ok" : "WRONG", sums_equal ? "yes" : "NO");

  // A memfd with content around the ring.
  bool fd_ok = true;
  if (n > 1) {
    const int memfd = ::memfd_create("engramlab-ring", MFD_CLOEXEC);
    const std::string text = "hello from rank " + std::to_string(rank);
    if (memfd < 0) return fail(ipc::open_failed(errno, "a memfd for the ring"));
    if (::write(memfd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      ::close(memfd);
      return fail(internal_error("writing the ring's memfd failed"));
    }
    const int32_t tag = rank * 1000;
    if (auto s = (*fds)->send_fd((rank + 1) % n, memfd, std::as_bytes(std::span(&tag, 1))); !s.is_ok()) return fail(s);
    ::close(memfd);
    const int from = (rank + n - 1) % n;
    auto got = (*fds)->recv_fd(from);
    if (!got.is_ok()) return fail(got.status());
    char buf[64] = {};
    const ssize_t r = ::pread(got->fd, buf, sizeof(buf) - 1, 0);
    ::close(got->fd);
    int32_t got_tag = -1;
    if (got->header.size() == sizeof(got_tag)) std::memcpy(&got_tag, got->header.data(), sizeof(got_tag));
    const std::string expect = "hello from rank " + std::to_string(from);
    fd_ok = r == static_cast<ssize_t>(expect.size()) && std::string(buf) == expect && got_tag == from * 1000;
    std::printf("rank %d: fd from rank %d reads \"%s\" (header %d): %s\n", rank, from, buf, got_tag, fd_ok ? "ok" : "WRONG");
  }

  // Collectives against the shared reference arithmetic.
  const size_t chunk = 3;
  std::vector<std::vector<uint16_t>> inputs(static_cast<size_t>(n), std::vector<uint16_t>(chunk * static_cast<size_t>(n)));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < inputs[static_cast<size_t>(r)].size(); ++i)
      inputs[static_cast<size_t>(r)][i] = float_to_bf16(0.1f * static_cast<float>(r + 1) + 1.37f * static_cast<float>(i));
  std::vector<uint16_t> reduced(chunk), expected(chunk);
  if (auto s = coll.reduce_scatter_sum_bf16(inputs[static_cast<size_t>(rank)], reduced); !s.is_ok()) return fail(s);
  std::vector<std::span<const uint16_t>> views(inputs.begin(), inputs.end());
  reduce_scatter_sum_bf16_reference(views, rank, expected);
  const bool rs_ok = reduced == expected;
  std::vector<int32_t> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) send[static_cast<size_t>(j)] = rank * 100 + j;
  if (auto s = coll.all_to_all(std::as_bytes(std::span(send)), std::as_writable_bytes(std::span(recv))); !s.is_ok()) return fail(s);
  bool a2a_ok = true;
  for (int r = 0; r < n; ++r) a2a_ok = a2a_ok && recv[static_cast<size_t>(r)] == r * 100 + rank;
  auto half = coll.split(rank % 2, -rank);
  if (!half.is_ok()) return fail(half.status());
  std::vector<int32_t> members(static_cast<size_t>((*half)->size()));
  const int32_t me = rank;
  if (auto s = (*half)->all_gather(std::as_bytes(std::span(&me, 1)), std::as_writable_bytes(std::span(members))); !s.is_ok()) return fail(s);
  bool split_ok = true;
  for (size_t i = 0; i < members.size(); ++i) split_ok = split_ok && members[i] % 2 == rank % 2 && (i == 0 || members[i] < members[i - 1]);
  std::printf("rank %d: reduce_scatter %s, all_to_all %s, split %s\n", rank, rs_ok ? "ok" : "WRONG",
              a2a_ok ? "ok" : "WRONG", split_ok ? "ok" : "WRONG");

  if (auto s = coll.barrier(); !s.is_ok()) return fail(s);
  mapping.reset();
  if (rank == 0) {
    owner.armed = false;
    if (auto s = memory.unlink(name); !s.is_ok()) return fail(s);
  }
  const bool all_ok = bytes_ok && sums_equal && fd_ok && rs_ok && a2a_ok && split_ok;
  std::printf("rank %d: %s\n", rank, all_ok ? "SELFTEST OK" : "SELFTEST FAILED");
  std::fflush(stdout);
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  engram::ipc::tear_down_on_termination_signals();  // as every engramlab rank does
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (value == nullptr) {
      std::fprintf(stderr, "host_worker: %s needs a value\n", flag.c_str());
      return 2;
    }
    if (flag == "--shm-dir") args.shm_dir = value;
    else if (flag == "--socket-dir") args.socket_dir = value;
    else if (flag == "--bytes") args.bytes = std::stoull(value);
    else if (flag == "--op-timeout-ms") args.op_timeout_ms = std::stoi(value);
    else if (flag == "--kill-rank") args.kill_rank = std::stoi(value);
    else if (flag == "--fd-to-rank") args.fd_to_rank = std::stoi(value);
    else if (flag == "--hold-agent-port") args.hold_agent_port = std::stoi(value) != 0;
    else {
      std::fprintf(stderr, "host_worker: unknown flag %s\n", flag.c_str());
      return 2;
    }
    ++i;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return run(args);
}
