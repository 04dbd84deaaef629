// `--flag value [value...]` parsing for the data commands (`loom preprocess`, `loom tokenizer`).
// Bad arguments throw ConfigError followed by the command's usage.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "loom/core/error.h"

namespace loom::data::cli {

// --flag value [value...] parsing: multi-valued flags collect until the next --flag.
struct Parsed {
  std::map<std::string, std::vector<std::string>> values;
  std::set<std::string> switches;
};

inline Parsed parse(const std::vector<std::string>& args, const std::set<std::string>& valued,
             const std::set<std::string>& multi, const std::set<std::string>& switches, const char* usage) {
  Parsed p;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    std::string inline_value;
    bool has_inline = false;
    if (const auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_inline = true;
    }
    if (switches.count(a)) {
      LOOM_CHECK(!has_inline, ConfigError, a, " takes no value\n", usage);
      p.switches.insert(a);
      continue;
    }
    LOOM_CHECK(valued.count(a) || multi.count(a), ConfigError, "unknown option '", a, "'\n", usage);
    auto& out = p.values[a];
    out.clear();
    if (has_inline) {
      out.push_back(inline_value);
      continue;
    }
    while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      out.push_back(args[++i]);
      if (!multi.count(a)) break;
    }
    LOOM_CHECK(!out.empty(), ConfigError, a, " needs a value\n", usage);
  }
  return p;
}

inline std::string required(const Parsed& p, const std::string& flag, const char* usage) {
  auto it = p.values.find(flag);
  LOOM_CHECK(it != p.values.end(), ConfigError, flag, " is required\n", usage);
  return it->second.front();
}

inline int64_t integer(const Parsed& p, const std::string& flag, int64_t fallback, const char* usage) {
  auto it = p.values.find(flag);
  if (it == p.values.end()) return fallback;
  try {
    size_t used = 0;
    const int64_t v = std::stoll(it->second.front(), &used);
    if (used == it->second.front().size()) return v;
  } catch (const std::exception&) {
  }
  LOOM_THROW(ConfigError, flag, ": '", it->second.front(), "' is not an integer\n", usage);
}


// The value of an optional flag, or `fallback`.
inline std::string value_or(const Parsed& p, const std::string& flag, const std::string& fallback) {
  const auto it = p.values.find(flag);
  return it == p.values.end() ? fallback : it->second.front();
}

}  // namespace loom::data::cli
