// Data, checkpoint and configuration files are read whole or mapped: only a regular file can be.
// Opening a FIFO blocks until a writer comes, a device streams forever, a directory fails with a
// confusing errno; each is refused up front, saying what the path is.
#pragma once

#include <string>

namespace loom {

// "" for a regular file (symbolic links followed), else what the path is: "missing", "a
// directory", "a FIFO (named pipe)", "a character device", "a block device", "a socket",
// "a dangling symbolic link", "not accessible (<reason>)".
std::string non_regular_kind(const std::string& path);

// Throws IOError "<what> '<path>' is <kind>, not a regular file; <fix>" unless `path` is a regular
// file. `what` names the role ("data file", "checkpoint file"), `fix` what to do.
void require_regular_file(const std::string& path, const std::string& what, const std::string& fix);

}  // namespace loom
