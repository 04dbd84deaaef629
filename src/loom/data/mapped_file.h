// A read-only memory map of a whole file. Megatron datasets are far larger than memory; the page
// cache does the caching and every loader thread reads the same mapping without locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace loom::data {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws IOError naming the path when the file cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();
  std::string path_;
  const unsigned char* data_ = nullptr;  // null for an empty file
  size_t size_ = 0;
};

}  // namespace loom::data
