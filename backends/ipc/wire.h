// Little-endian-native byte packing for the small control messages of the
// fd channel and the collectives (both ends are the same build on the same
// architecture; the magic and version fields catch a mismatch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace engram::ipc {

class ByteWriter {
 public:
  template <typename T>
  void put(T value) {
    const auto* p = reinterpret_cast<const std::byte*>(&value);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    bytes_.insert(bytes_.end(), p, p + s.size());
  }
  void put_bytes(std::span<const std::byte> bytes) { bytes_.insert(bytes_.end(), bytes.begin(), bytes.end()); }
  std::vector<std::byte>& bytes() { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
};

// Every read is bounds-checked: the bytes may come from a stranger.
class ByteReader {
 public:
  ByteReader(const std::byte* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  std::optional<T> get() {
    if (size_ - offset_ < sizeof(T)) return std::nullopt;
    T value;
    std::memcpy(&value, data_ + offset_, sizeof(T));
    offset_ += sizeof(T);
    return value;
  }
  std::optional<std::string> get_string(size_t max_bytes) {
    auto n = get<uint32_t>();
    if (!n || *n > max_bytes || size_ - offset_ < *n) return std::nullopt;
    std::string s(reinterpret_cast<const char*>(data_ + offset_), *n);
    offset_ += *n;
    return s;
  }
  bool at_end() const { return offset_ == size_; }

 private:
  const std::byte* data_;
  size_t size_;
  size_t offset_ = 0;
};

}  // namespace engram::ipc
