// Scalar typing by the YAML 1.2 core schema (what yaml-cpp leaves to the application).
// Deliberately YAML 1.2, not PyYAML's YAML 1.1: `1e-5` is a float here (PyYAML reads it as a
// string), and yes/no/on/off are strings, not booleans.
#pragma once

#include <string>

#include "loom/config/config_node.h"
#include "loom/core/text.h"

namespace loom::config {

// Types a plain (unquoted) scalar: null (~, null, Null, NULL, empty), bool (true/True/TRUE,
// false/...), int (decimal, 0o octal, 0x hex), float (1.5, 1.e-5, 1e-5, .inf, .nan) or str.
// Returns false (and sets *error) for an integer that does not fit in 64 bits.
bool resolve_plain_scalar(const std::string& text, ConfigNode& out, std::string* error);

// Floats are written as YAML reads them back (loom/core/text.h; optim's messages use it too).
using loom::format_float;

// True if `text` written unquoted would read back as this same string.
bool plain_text_stays_string(const std::string& text);

}  // namespace loom::config
