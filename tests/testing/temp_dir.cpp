#include "testing/temp_dir.h"

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>

#include "loom/core/error.h"

namespace loom::testing {

TempDir::TempDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  auto base = std::filesystem::temp_directory_path();
  path_ = base / (tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_file(const std::string& path, const std::string& content) {
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  std::ofstream out(path, std::ios::binary);
  LOOM_CHECK(out.good(), IOError, "cannot write ", path);
  out << content;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in.good(), IOError, "cannot read ", path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace loom::testing
