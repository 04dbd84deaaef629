#include "loom/data/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "loom/core/error.h"

namespace loom::data {

void write_file_atomic(const std::string& path, std::string_view bytes) {
  static std::atomic<uint64_t> counter{0};
  std::random_device entropy;
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" +
                          std::to_string(counter++) + "-" + std::to_string(entropy());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  LOOM_CHECK(fd >= 0, IOError, "cannot create ", tmp, ": ", std::strerror(errno),
             " (is the cache directory writable?)");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      LOOM_THROW(IOError, "cannot write ", tmp, ": ", std::strerror(err), " (disk full?)");
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    LOOM_THROW(IOError, "cannot write ", tmp, ": ", std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    LOOM_THROW(IOError, "cannot rename ", tmp, " to ", path, ": ", std::strerror(err));
  }
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in.good(), IOError, "cannot read ", path, ": ", std::strerror(errno));
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace loom::data
