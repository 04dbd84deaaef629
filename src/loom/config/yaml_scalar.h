// Scalar typing by the YAML 1.2 core schema (what yaml-cpp leaves to the application).
// Deliberately YAML 1.2, not PyYAML's YAML 1.1: `1e-5` is a float here (PyYAML reads it as a
// string), and yes/no/on/off are strings, not booleans.
#pragma once

#include <string>

#include "loom/config/config_node.h"

namespace loom::config {

// Types a plain (unquoted) scalar: null (~, null, Null, NULL, empty), bool (true/True/TRUE,
// false/...), int (decimal, 0o octal, 0x hex), float (1.5, 1.e-5, 1e-5, .inf, .nan) or str.
// Returns false (and sets *error) for an integer that does not fit in 64 bits.
bool resolve_plain_scalar(const std::string& text, ConfigNode& out, std::string* error);

// Shortest text that reads back as the same double and always as a float, also under YAML 1.1
// (so `1e-05` is written `1.0e-05`): 0.9, 1.0, 1.0e-08, .inf, -.inf, .nan.
std::string format_float(double value);

// True if `text` written unquoted would read back as this same string.
bool plain_text_stays_string(const std::string& text);

}  // namespace loom::config
