#include "backends/shm/segment_header.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

namespace engram::shm {

std::string this_boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

uint64_t this_pid_namespace() {
  struct stat st{};
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

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

SegmentHeader make_header_for_this_process(uint64_t data_bytes, bool holds_lock) {
  SegmentHeader header{};
  std::memcpy(header.magic, kSegmentMagic, sizeof(header.magic));
  header.data_bytes = data_bytes;
  header.creator_pid = ::getpid();
  header.creator_start_ticks = process_start_ticks(header.creator_pid);
  const std::string boot_id = this_boot_id();
  std::strncpy(header.creator_boot_id, boot_id.c_str(), sizeof(header.creator_boot_id) - 1);
  header.creator_pid_namespace = this_pid_namespace();
  header.holder_lock = holds_lock ? kHolderLockOfd : 0;
  return header;
}

bool header_is_valid(const SegmentHeader& header) {
  return std::memcmp(header.magic, kSegmentMagic, sizeof(header.magic)) == 0 && header.creator_pid > 0;
}

}  // namespace engram::shm
