// Byte sizes as users write them ("64MiB", "190GiB", "8G") and as we print them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace engram {

inline constexpr uint64_t kKiB = 1024ull;
inline constexpr uint64_t kMiB = 1024ull * kKiB;
inline constexpr uint64_t kGiB = 1024ull * kMiB;
// The largest size any field takes (1 EiB): sums of a few thousand such
// sizes still fit in 64 bits, signed.
inline constexpr uint64_t kMaxSizeBytes = 1ull << 60;

// How the single letters K, M, G, T, P read in the context a size comes from.
enum class SizeUnits : uint8_t {
  kBinaryLetters,  // Docker (--shm-size=189g), a tmpfs mount (size=189G): K/M/G/T/P are powers of 1024
  kKubernetes,     // Kubernetes quantities (sizeLimit, memory limits): K/M/G/T/P powers of 1000, Ki/Mi/Gi/Ti/Pi of 1024
};

// Accepts a number with a unit, in any case: B; Ki, Mi, Gi, Ti, Pi and KiB,
// MiB, GiB, TiB, PiB (binary); KB, MB, GB, TB, PB (decimal); K, M, G, T, P
// alone as `units` says. A bare number is refused (the error shows the
// ways to write it); fractions round to the nearest byte; at most
// kMaxSizeBytes. `field` names the setting in the error, which shows the
// text cut to a readable length.
Result<uint64_t> parse_bytes(std::string_view text, std::string_view field,
                             SizeUnits units = SizeUnits::kBinaryLetters);

// Where `text` ends in a letter alone (K M G T P, no i or B) read as a
// Kubernetes quantity, the size in both units so the reader sees which was
// meant: "200G = 200 x 10^9 B = 186.26 GiB (a Kubernetes quantity; 200Gi is
// 200 x 2^30)"; nullopt for any other text.
std::optional<std::string> kubernetes_letter_reading(std::string_view text, uint64_t bytes);

// The units above as a table, for --help (the program's and plan's).
inline constexpr std::string_view kSizeUnitsHelp =
    "Sizes take a unit (a bare number is refused), in any case:\n"
    "  B                  bytes\n"
    "  Ki Mi Gi Ti Pi     powers of 1024 (189Gi = 189 x 2^30), also written KiB MiB GiB TiB PiB\n"
    "  KB MB GB TB PB     powers of 1000 (190GB = 176.95 GiB)\n"
    "  K M G T P alone    as the tool the size is for reads them: powers of 1024 for Docker\n"
    "                     (--shm-size=189g, --memory=189g), a tmpfs mount (size=189G), systemd\n"
    "                     (MemoryMax=189G) and our own fields and flags; powers of 1000 in\n"
    "                     Kubernetes quantities (sizeLimit, resources.limits.memory, and\n"
    "                     shm_size_limit / --shm-size-limit), where 189G = 189 x 10^9 and Gi is 2^30\n"
    "  Fractions are rounded to the nearest byte: 189.9GiB, 0.5MiB.\n";

// A fraction in (0, 1], e.g. "0.9"; anything else is invalid_argument naming `field`.
Result<double> parse_fraction(std::string_view text, std::string_view field);

// "94.415 GiB" (three decimals), or "512 MiB" under 1 GiB.
std::string format_gib(uint64_t bytes);
// format_gib of a signed amount ("-44.416 GiB" over a limit); INT64_MIN too.
std::string format_signed_gib(int64_t bytes);
std::string format_bytes(uint64_t bytes);

inline uint64_t round_up(uint64_t value, uint64_t multiple) {
  return multiple == 0 ? value : (value + multiple - 1) / multiple * multiple;
}

}  // namespace engram
