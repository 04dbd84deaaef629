// Command-line helpers shared by the loom subcommands: walking "--flag value" arguments and
// reading positive integers, with the same messages and exit code 2 everywhere.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace loom::app {

class ArgCursor {
 public:
  ArgCursor(const std::vector<std::string>& args, const char* usage) : args_(args), usage_(usage) {}
  bool done() const { return i_ >= args_.size(); }
  // The next argument (a flag, or "--").
  const std::string& next() { return args_[i_++]; }
  // The argument next() would return, without taking it (call only when !done()).
  const std::string& peek() const { return args_[i_]; }
  // The value after the flag just read; a missing value prints the usage and exits 2.
  std::string value() {
    if (i_ >= args_.size()) {
      std::fprintf(stderr, "error: %s needs a value\n%s", args_[i_ - 1].c_str(), usage_);
      std::exit(2);
    }
    return args_[i_++];
  }
  // Everything not read yet (what follows "--").
  std::vector<std::string> rest() const {
    return std::vector<std::string>(args_.begin() + static_cast<std::ptrdiff_t>(i_), args_.end());
  }

 private:
  const std::vector<std::string>& args_;
  const char* usage_;
  size_t i_ = 0;
};

// "4" → 4; false for anything that is not an integer in [1, 2^20].
inline bool parse_positive(const std::string& text, int* out) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || !end || *end || v < 1 || v > 1 << 20) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace loom::app
