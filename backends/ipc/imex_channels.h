// IMEX channels: the device files the IMEX daemon's channel driver creates
// (/dev/nvidia-caps-imex-channels/channel0, ...). A process can import a
// FABRIC handle from another node only through such a channel, so the
// real host probe and `engramlab doctor` both ask this one place.
#pragma once

#include <string>
#include <vector>

namespace engram::ipc {

inline constexpr const char* kImexChannelDir = "/dev/nvidia-caps-imex-channels";

// The names of the channel* entries in `dir`, sorted; empty when `dir` is
// absent, unreadable, or holds no channel* entry.
std::vector<std::string> imex_channels(const std::string& dir = kImexChannelDir);

// imex_channels(dir) is not empty.
bool has_imex_channel(const std::string& dir = kImexChannelDir);

}  // namespace engram::ipc
