#include "loom/core/regular_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "loom/core/error.h"

namespace loom {

std::string non_regular_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    struct stat link {};
    if (err == ENOENT && ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) return "a dangling symbolic link";
    if (err == ENOENT || err == ENOTDIR) return "missing";
    return std::string("not accessible (") + std::strerror(err) + ")";
  }
  if (S_ISREG(st.st_mode)) return "";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISFIFO(st.st_mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a regular file";
}

void require_regular_file(const std::string& path, const std::string& what, const std::string& fix) {
  const std::string kind = non_regular_kind(path);
  if (kind.empty()) return;
  if (kind == "missing") LOOM_THROW(IOError, what, " '", path, "' does not exist; ", fix);
  LOOM_THROW(IOError, what, " '", path, "' is ", kind, ", not a regular file; ", fix);
}

}  // namespace loom
