// File descriptors, the limit a job meets first: the rendezvous leader holds
// one socket per member, every rank an epoll set, an eventfd and a socket per
// peer it talks to. The soft RLIMIT_NOFILE (often 1024, in containers as low
// as 64) is raised to the hard one at start, as NCCL does; what still does not
// fit is an error naming the limit and how many the job needs.
#pragma once

#include <boost/system/system_error.hpp>
#include <cstdint>
#include <string>
#include <system_error>

#include "core/base/status.h"

namespace engram::ipc {

struct FdLimit {
  uint64_t soft = 0;
  uint64_t hard = 0;
};

FdLimit fd_limit();
// Soft up to hard (capped at fs.nr_open, which an unlimited hard limit
// cannot pass). Returns the limit now in force; on failure, the old one.
FdLimit raise_fd_limit();
// Descriptors this process has open now (/proc/self/fd); 0 when unknown.
uint64_t open_fd_count();

// resource_exhausted when `needed` more descriptors do not fit under the soft
// limit beside those open: names RLIMIT_NOFILE's soft and hard values, the
// count open, what needs them (`what`, e.g. "rank 0, the rendezvous leader
// of 64 ranks, holds one socket per member") and the fix.
Status check_fds_available(uint64_t needed, const std::string& what);

// The same error for an EMFILE/ENFILE that happened anyway.
Status fd_exhausted(const std::string& what, const std::string& cause);

// What a failed open(2)/openat(2)/socket(2)/memfd_create(2) of `what`
// becomes: fd_exhausted (resource_exhausted naming RLIMIT_NOFILE and the fix)
// for EMFILE/ENFILE, failed_precondition "cannot open <what>: <strerror>" for
// any other errno. So running out of descriptors never reads as a bad path.
Status open_failed(int err, const std::string& what);

// Runs `body` (returning a Result or Status). Boost.Asio throws when the
// kernel refuses it an epoll set, an eventfd or a timerfd (EMFILE): that
// becomes fd_exhausted naming `what`, or unavailable for another errno,
// never an uncaught exception.
template <typename Body>
auto without_asio_exceptions(const std::string& what, Body&& body) -> decltype(body()) {
  auto as_status = [&](int err, const char* text) {
    return err == EMFILE || err == ENFILE ? fd_exhausted(what, text)
                                          : unavailable(what + " failed: " + std::string(text));
  };
  try {
    return body();
  } catch (const boost::system::system_error& e) {
    return as_status(e.code().value(), e.what());
  } catch (const std::system_error& e) {
    return as_status(e.code().value(), e.what());
  }
}

}  // namespace engram::ipc
