// A fresh directory under the system temp dir, removed (with its contents) when the test ends.
#pragma once

#include <filesystem>
#include <string>

namespace loom::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& tag = "loom-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Writes `content` to `path` (binary), creating parent directories.
void write_file(const std::string& path, const std::string& content);
std::string read_file(const std::string& path);

}  // namespace loom::testing
