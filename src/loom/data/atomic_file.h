// Whole-file writes that readers never observe half done: the bytes go to a unique temporary name
// in the same directory, then rename(2) replaces the target in one step. Two processes building
// the same index cache at once each publish a complete file; the last rename wins.
#pragma once

#include <string>
#include <string_view>

namespace loom::data {

// Throws IOError naming the path on failure (the temporary file is removed).
void write_file_atomic(const std::string& path, std::string_view bytes);
// Reads a whole file; throws IOError naming the path.
std::string read_whole_file(const std::string& path);

}  // namespace loom::data
