// Short sizes for messages users act on: "188.8 GiB", "64 MiB". The exact
// byte counts stay in the memory table; these are for warnings and errors.
#pragma once

#include <cstdint>
#include <string>

namespace engram {

// One decimal in GiB from 1 GiB up ("188.8 GiB"); below that whole MiB when
// exact ("64 MiB"), else one decimal; then KiB; then bytes.
std::string format_size_short(uint64_t bytes);

}  // namespace engram
