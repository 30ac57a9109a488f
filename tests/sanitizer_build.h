// Whether this test binary runs under AddressSanitizer (the suite's second
// pass). ASan reserves terabytes of shadow address space, keeps fds and
// threads of its own and cannot trace a process under ptrace, so tests that
// set RLIMIT_AS, fd or pids limits, or measure peak memory, skip there,
// saying why; the release pass runs them.
#pragma once

namespace engram::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitizerBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitizerBuild = true;
#else
inline constexpr bool kSanitizerBuild = false;
#endif
#else
inline constexpr bool kSanitizerBuild = false;
#endif

}  // namespace engram::testing

#define ENGRAM_SKIP_UNDER_SANITIZERS(why)                                                  \
  do {                                                                                     \
    if (::engram::testing::kSanitizerBuild) GTEST_SKIP() << "under AddressSanitizer: " << why; \
  } while (0)
