// An LD_PRELOAD interposer for one test (split_listen_emfile_test.cc): in the
// process whose RANK is ENGRAMLAB_TEST_EMFILE_LISTEN_RANK, the
// ENGRAMLAB_TEST_EMFILE_LISTEN_NTH-th listen() on an IPv4/IPv6 socket fails
// with EMFILE, as it does when a process runs out of descriptors between its
// headroom check and the listen. Every other call goes to libc's listen.
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

namespace {

int inet_listens = 0;

bool this_rank_is_the_target() {
  const char* target = getenv("ENGRAMLAB_TEST_EMFILE_LISTEN_RANK");
  const char* rank = getenv("RANK");
  return target != nullptr && rank != nullptr && strcmp(target, rank) == 0;
}

bool is_inet(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return false;
  return address.ss_family == AF_INET || address.ss_family == AF_INET6;
}

}  // namespace

extern "C" int listen(int fd, int backlog) {
  using Listen = int (*)(int, int);
  static const Listen libc_listen = reinterpret_cast<Listen>(dlsym(RTLD_NEXT, "listen"));
  if (this_rank_is_the_target() && is_inet(fd)) {
    const char* nth = getenv("ENGRAMLAB_TEST_EMFILE_LISTEN_NTH");
    if (++inet_listens == (nth != nullptr ? atoi(nth) : 1)) {
      errno = EMFILE;
      return -1;
    }
  }
  return libc_listen(fd, backlog);
}
