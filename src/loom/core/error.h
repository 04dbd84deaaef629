// Typed errors. Every check that can fail on user input says what failed and what would fix it;
// the type tells callers (and tests) which kind of input was wrong.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace loom {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A tensor's shape does not fit the operation (message names the op, the shapes and the rule).
class ShapeError : public Error { using Error::Error; };
// Unsupported or mismatched dtype.
class DTypeError : public Error { using Error::Error; };
// Tensor on the wrong device, or a device that this build does not support.
class DeviceError : public Error { using Error::Error; };
// A value outside its allowed range (arguments to library calls).
class ValueError : public Error { using Error::Error; };
// Wrong type of a value (configuration or arguments).
class TypeError : public Error { using Error::Error; };
// Configuration file or override problems.
class ConfigError : public Error { using Error::Error; };
// Data files (.bin/.idx, jsonl, tokenizer models).
class DataError : public Error { using Error::Error; };
// Checkpoint files and directories.
class CheckpointError : public Error { using Error::Error; };
// Collective communication / multi-process failures.
class DistError : public Error { using Error::Error; };
// Autograd misuse (backward twice through freed buffers, non-scalar root without grad...).
class AutogradError : public Error { using Error::Error; };
// I/O failures (open, read, write, rename) with the path.
class IOError : public Error { using Error::Error; };

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace loom

// LOOM_CHECK(cond, ShapeError, "linear: x ", x.shape(), " and weight ", w.shape(), " ...");
#define LOOM_CHECK(cond, ErrorType, ...)                                   \
  do {                                                                     \
    if (!(cond)) throw ::loom::ErrorType(::loom::detail::concat(__VA_ARGS__)); \
  } while (0)

#define LOOM_THROW(ErrorType, ...) throw ::loom::ErrorType(::loom::detail::concat(__VA_ARGS__))

// Internal invariant (a bug in Loom, not bad input).
#define LOOM_ASSERT(cond, ...)                                                            \
  do {                                                                                    \
    if (!(cond))                                                                          \
      throw ::loom::Error(::loom::detail::concat("internal error at ", __FILE__, ":",    \
                                                 __LINE__, ": ", #cond, " ", ##__VA_ARGS__)); \
  } while (0)
