// Reading a configuration file safely: every malformed input (missing, huge, binary, not
// UTF-8, tabs, too deep, alias bombs, several documents, duplicate keys) ends in a ConfigError
// that names the file and line, never in a crash or a hang.
#pragma once

#include <cstddef>
#include <string>

#include "loom/config/config_node.h"
#include "loom/config/diagnostics.h"

namespace loom::config {

struct ReadLimits {
  // A configuration is a few KB; anything this large is the wrong file (a dataset, a checkpoint).
  std::size_t max_bytes = 4u << 20;
  // Sections nest about five levels deep; the limit stops recursion-depth attacks before
  // yaml-cpp's recursive parser sees them.
  int max_depth = 64;
  // Values after expanding aliases; stops "billion laughs" alias bombs.
  std::size_t max_nodes = 100000;
};

// Reads the file after checking that it exists and is not too large. Throws ConfigReadError.
std::string read_config_file(const std::string& path, const ReadLimits& limits = {});

// Rejects NUL bytes, invalid UTF-8, UTF-16, control characters, tabs in indentation and nesting
// deeper than limits.max_depth, before any YAML parsing. Throws ConfigReadError.
void screen_config_text(const std::string& text, const std::string& source,
                        const ReadLimits& limits = {});

// Parses exactly one YAML document into a ConfigNode (scalars typed by YAML 1.2, merge keys
// `<<` applied). Unparseable text throws ConfigReadError; duplicate keys, a line without ':'
// and similar problems are added to `diag` as errors.
ConfigNode parse_config_text(const std::string& text, const std::string& source, Diagnostics& diag,
                             const ReadLimits& limits = {});

// A value written on the command line (`--set key=VALUE`): a YAML flow scalar, [list] or {map}.
// Every node is marked with `mark`. Throws ConfigError if VALUE is not YAML.
ConfigNode parse_inline_value(const std::string& text, const SourceMark& mark);

}  // namespace loom::config
