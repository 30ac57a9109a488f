#include "backends/emulated_driver/imex_service.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "core/backend/vmm_world_rules.h"

namespace engram::emulated {
namespace {

constexpr unsigned char kMagic[4] = {'E', 'M', 'U', 'F'};

struct Export {
  int fd = -1;
  unsigned char nonce[16] = {};
};

struct Request {
  uint64_t export_id = 0;
  unsigned char nonce[16] = {};
  int32_t importer_host = -1;
};

struct Reply {
  int32_t ok = 0;
  char cu_error[48] = {};
  char why[512] = {};
};

std::mutex g_mutex;
std::map<uint64_t, Export> g_exports;
uint64_t g_next_export = 1;
int g_listener = -1;

uint64_t checksum(const unsigned char* bytes, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return h;
}

sockaddr_un address_of(const Process& p, uint32_t pid, socklen_t& length) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // Abstract: sun_path[0] is NUL, the name follows; no file exists.
  const std::string name = "engramlab-emu-imex." + p.world_id + "." + std::to_string(pid);
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return addr;
}

void fill(Reply& r, const char* cu_error, const std::string& why) {
  r.ok = 0;
  std::snprintf(r.cu_error, sizeof r.cu_error, "%s", cu_error);
  std::snprintf(r.why, sizeof r.why, "%s", why.c_str());
}

vmm_rules::FabricHost fabric_host(const Process& p, int host) {
  const WorldHost& h = p.world.hosts[static_cast<size_t>(host)];
  return {.name = h.name, .where = "host " + h.name, .gpu_model = h.model, .fabric_attribute = h.fabric,
          .imex_channel = h.imex};
}

void answer(const Process& p, int connection) {
  Request request;
  if (::recv(connection, &request, sizeof request, 0) != static_cast<ssize_t>(sizeof request)) return;
  Reply reply;
  int fd = -1;
  const int hosts = static_cast<int>(p.world.hosts.size());
  if (request.importer_host < 0 || request.importer_host >= hosts) {
    fill(reply, "CUDA_ERROR_INVALID_VALUE", "cuMemImportFromShareableHandle(FABRIC): the importer names no host");
  } else if (auto refused = vmm_rules::fabric_import_capability_refusal(fabric_host(p, request.importer_host),
                                                      "cuMemImportFromShareableHandle(FABRIC)")) {
    fill(reply, refused->cu_error, refused->why);
  } else {
    const WorldHost& mine = p.my_host();
    const WorldHost& theirs = p.world.hosts[static_cast<size_t>(request.importer_host)];
    auto outside = vmm_rules::fabric_import_refusal(mine.name, mine.domain, theirs.name, theirs.domain,
                                                    mine.name == theirs.name && mine.boot_id == theirs.boot_id);
    std::lock_guard lock(g_mutex);
    auto it = g_exports.find(request.export_id);
    if (outside) {
      fill(reply, outside->cu_error, outside->why);
    } else if (it == g_exports.end() || std::memcmp(it->second.nonce, request.nonce, sizeof request.nonce) != 0) {
      fill(reply, "CUDA_ERROR_INVALID_VALUE",
           "cuMemImportFromShareableHandle: the exported allocation no longer exists (its exporter released it)");
    } else {
      reply.ok = 1;
      fd = it->second.fd;
    }
  }
  iovec io{&reply, sizeof reply};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  ::sendmsg(connection, &msg, MSG_NOSIGNAL);
}

void serve(const Process* p, int listener) {
  for (;;) {
    const int connection = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    answer(*p, connection);
    ::close(connection);
  }
}

// Called with g_mutex held.
bool ensure_listening(const Process& p, std::string& error) {
  if (g_listener >= 0) return true;
  const int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  socklen_t length = 0;
  sockaddr_un addr = address_of(p, static_cast<uint32_t>(::getpid()), length);
  if (::bind(s, reinterpret_cast<sockaddr*>(&addr), length) != 0 || ::listen(s, 128) != 0) {
    error = std::string("the emulated IMEX service cannot listen: ") + std::strerror(errno);
    ::close(s);
    return false;
  }
  g_listener = s;
  // Lives as long as the process: the exporter's memory is importable while
  // the exporter runs, as on a real node while its IMEX daemon does.
  std::thread(serve, &p, s).detach();
  return true;
}

uint64_t world_word(const Process& p) { return std::strtoull(p.world_id.c_str(), nullptr, 16); }

}  // namespace

bool register_fabric_export(const Process& p, int fd, int gpu, uint64_t bytes, uint64_t& export_id,
                            unsigned char (&handle)[kFabricHandleBytes], std::string& error) {
  std::lock_guard lock(g_mutex);
  if (!ensure_listening(p, error)) return false;
  Export e;
  int random = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (random < 0 || ::read(random, e.nonce, sizeof e.nonce) != static_cast<ssize_t>(sizeof e.nonce)) {
    error = "cannot read /dev/urandom for the handle's nonce";
    if (random >= 0) ::close(random);
    return false;
  }
  ::close(random);
  e.fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (e.fd < 0) {
    error = std::string("dup: ") + std::strerror(errno);
    return false;
  }
  export_id = g_next_export++;
  g_exports[export_id] = e;
  std::memset(handle, 0, kFabricHandleBytes);
  const uint64_t world = world_word(p);
  const uint32_t pid = static_cast<uint32_t>(::getpid());
  const int32_t host = p.host;
  const int32_t g = gpu;
  std::memcpy(handle, kMagic, 4);
  std::memcpy(handle + 4, &world, 8);
  std::memcpy(handle + 12, &pid, 4);
  std::memcpy(handle + 16, &export_id, 8);
  std::memcpy(handle + 24, e.nonce, 16);
  std::memcpy(handle + 40, &host, 4);
  std::memcpy(handle + 44, &g, 4);
  std::memcpy(handle + 48, &bytes, 8);
  const uint64_t check = checksum(handle, 56);
  std::memcpy(handle + 56, &check, 8);
  return true;
}

void unregister_fabric_export(uint64_t export_id) {
  std::lock_guard lock(g_mutex);
  auto it = g_exports.find(export_id);
  if (it == g_exports.end()) return;
  ::close(it->second.fd);
  g_exports.erase(it);
}

FabricImport import_fabric(const Process& p, const unsigned char (&handle)[kFabricHandleBytes]) {
  FabricImport out;
  uint64_t world = 0;
  uint64_t check = 0;
  uint32_t pid = 0;
  Request request;
  std::memcpy(&world, handle + 4, 8);
  std::memcpy(&pid, handle + 12, 4);
  std::memcpy(&request.export_id, handle + 16, 8);
  std::memcpy(request.nonce, handle + 24, 16);
  std::memcpy(&out.host, handle + 40, 4);
  std::memcpy(&out.gpu, handle + 44, 4);
  std::memcpy(&out.bytes, handle + 48, 8);
  std::memcpy(&check, handle + 56, 8);
  if (std::memcmp(handle, kMagic, 4) != 0 || check != checksum(handle, 56) || world != world_word(p) ||
      out.host < 0 || out.host >= static_cast<int>(p.world.hosts.size())) {
    out.cu_error = "CUDA_ERROR_INVALID_VALUE";
    out.why = "cuMemImportFromShareableHandle(FABRIC): the 64 bytes are not a fabric handle";
    return out;
  }
  request.importer_host = p.host;
  const int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  socklen_t length = 0;
  sockaddr_un addr = address_of(p, pid, length);
  if (s < 0 || ::connect(s, reinterpret_cast<sockaddr*>(&addr), length) != 0) {
    const int why = errno;
    if (s >= 0) ::close(s);
    out.cu_error = "CUDA_ERROR_INVALID_VALUE";
    out.why = "cuMemImportFromShareableHandle: the exported allocation no longer exists (its exporter, pid " +
              std::to_string(pid) + ", is gone: " + std::strerror(why) + ")";
    return out;
  }
  Reply reply;
  iovec io{&reply, sizeof reply};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n = -1;
  if (::send(s, &request, sizeof request, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof request)) {
    do n = ::recvmsg(s, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
  }
  ::close(s);
  if (n != static_cast<ssize_t>(sizeof reply)) {
    out.cu_error = "CUDA_ERROR_INVALID_VALUE";
    out.why = "cuMemImportFromShareableHandle: the exporter (pid " + std::to_string(pid) +
              ") went away during the import";
    return out;
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&out.fd, CMSG_DATA(c), sizeof(int));
  if (!reply.ok) {
    if (out.fd >= 0) ::close(out.fd);
    out.fd = -1;
    // The reply's code is one of the driver's names; keep a stable pointer.
    static const char* kCodes[] = {"CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_NOT_PERMITTED", "CUDA_ERROR_NOT_SUPPORTED"};
    out.cu_error = kCodes[0];
    for (const char* c : kCodes)
      if (std::strcmp(c, reply.cu_error) == 0) out.cu_error = c;
    out.why = reply.why;
    return out;
  }
  if (out.fd < 0) {
    out.cu_error = "CUDA_ERROR_INVALID_VALUE";
    out.why = "cuMemImportFromShareableHandle: the exporter answered without the memory";
  }
  return out;
}

}  // namespace engram::emulated
