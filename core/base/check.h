// Contract checks that stay on in every build type (Debug, RelWithDebInfo,
// Release): a broken invariant in a memory-sharing system is worse than a
// crash, so these never compile out the way assert() does under NDEBUG.
// A failed check prints the expression and where, then aborts.
#pragma once

#define ENGRAM_CHECK(cond)                                                    \
  do {                                                                        \
    if (__builtin_expect(!(cond), 0)) ::engram::check_failed(#cond, __FILE__, __LINE__); \
  } while (0)

// The same, with a word on what the caller did wrong.
#define ENGRAM_CHECK_MSG(cond, why)                                           \
  do {                                                                        \
    if (__builtin_expect(!(cond), 0)) ::engram::check_failed(#cond, __FILE__, __LINE__, (why)); \
  } while (0)

namespace engram {
[[noreturn]] void check_failed(const char* expr, const char* file, int line, const char* why = nullptr);
}  // namespace engram
