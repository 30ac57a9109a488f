#include "backends/shm/segment_header.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace engram::shm {
namespace {
std::string read_boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}
}  // namespace

uint64_t process_start_ticks(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  // The command name (field 2) may hold spaces; fields resume after the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(line.substr(close + 2));
  std::string field;
  // After ')' come field 3 (state) onwards; start time is field 22.
  for (int index = 3; index <= 22; ++index) {
    if (!(fields >> field)) return 0;
  }
  return std::strtoull(field.c_str(), nullptr, 10);
}

SegmentHeader make_header_for_this_process(uint64_t data_bytes) {
  SegmentHeader header{};
  std::memcpy(header.magic, kSegmentMagic, sizeof(header.magic));
  header.data_bytes = data_bytes;
  header.creator_pid = ::getpid();
  header.creator_start_ticks = process_start_ticks(header.creator_pid);
  const std::string boot_id = read_boot_id();
  std::strncpy(header.creator_boot_id, boot_id.c_str(), sizeof(header.creator_boot_id) - 1);
  return header;
}

bool header_is_valid(const SegmentHeader& header) {
  return std::memcmp(header.magic, kSegmentMagic, sizeof(header.magic)) == 0 && header.creator_pid > 0;
}

bool creator_is_alive(const SegmentHeader& header) {
  if (!header_is_valid(header)) return false;
  // A segment from an earlier boot cannot have a live creator (/dev/shm on a
  // persistent mount, or a host dir bind-mounted in).
  if (std::strncmp(header.creator_boot_id, read_boot_id().c_str(), sizeof(header.creator_boot_id)) != 0) {
    return false;
  }
  const pid_t pid = static_cast<pid_t>(header.creator_pid);
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  // A killed creator that nobody has reaped yet still answers kill(0).
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (std::getline(stat, line)) {
    const size_t close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() &&
        (line[close + 2] == 'Z' || line[close + 2] == 'X')) {
      return false;
    }
  }
  const uint64_t now_ticks = process_start_ticks(pid);
  // Unknown start time on either side: trust kill(0) (alive).
  if (now_ticks == 0 || header.creator_start_ticks == 0) return true;
  return now_ticks == header.creator_start_ticks;
}

}  // namespace engram::shm
