// The message of the loom::Error a callable throws ("<no error>" when it throws none), for tests
// that check what an error says.
#pragma once

#include <functional>
#include <string>

#include "loom/core/error.h"

namespace loom::testing {

inline std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace loom::testing
