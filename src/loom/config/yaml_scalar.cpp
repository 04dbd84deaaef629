#include "loom/config/yaml_scalar.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <regex>

namespace loom::config {

namespace {

const std::regex& decimal_int() {
  static const std::regex re("[-+]?[0-9]+");
  return re;
}
const std::regex& octal_int() {
  static const std::regex re("0o[0-7]+");
  return re;
}
const std::regex& hex_int() {
  static const std::regex re("0x[0-9a-fA-F]+");
  return re;
}
const std::regex& core_float() {
  static const std::regex re("[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
  return re;
}

bool parse_int(const std::string& digits, int base, bool negative, std::int64_t& out) {
  // Parse the magnitude as unsigned so INT64_MIN is representable.
  std::uint64_t magnitude = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
  if (ec != std::errc() || ptr != digits.data() + digits.size()) return false;
  const std::uint64_t limit = negative ? std::uint64_t(1) << 63
                                       : static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (magnitude > limit) return false;
  out = negative ? static_cast<std::int64_t>(0 - magnitude) : static_cast<std::int64_t>(magnitude);
  return true;
}

}  // namespace

bool resolve_plain_scalar(const std::string& text, ConfigNode& out, std::string* error) {
  out.text = text;
  out.quoted = false;
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") {
    out.kind = ConfigNode::Kind::null;
    return true;
  }
  if (text == "true" || text == "True" || text == "TRUE" || text == "false" || text == "False" ||
      text == "FALSE") {
    out.kind = ConfigNode::Kind::boolean;
    out.boolean = text[0] == 't' || text[0] == 'T';
    return true;
  }
  const bool is_dec = std::regex_match(text, decimal_int());
  const bool is_oct = !is_dec && std::regex_match(text, octal_int());
  const bool is_hex = !is_dec && !is_oct && std::regex_match(text, hex_int());
  if (is_dec || is_oct || is_hex) {
    bool negative = false;
    std::string digits = text;
    int base = 10;
    if (is_dec) {
      if (digits[0] == '+' || digits[0] == '-') {
        negative = digits[0] == '-';
        digits = digits.substr(1);
      }
    } else {
      base = is_oct ? 8 : 16;
      digits = digits.substr(2);
    }
    out.kind = ConfigNode::Kind::integer;
    if (!parse_int(digits, base, negative, out.integer)) {
      if (error) *error = "integer " + text + " does not fit in 64 bits";
      return false;
    }
    return true;
  }
  if (std::regex_match(text, core_float())) {
    out.kind = ConfigNode::Kind::floating;
    out.floating = std::strtod(text.c_str(), nullptr);
    return true;
  }
  static const char* const infinities[] = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"};
  for (const char* s : infinities)
    if (text == s) {
      out.kind = ConfigNode::Kind::floating;
      out.floating = std::numeric_limits<double>::infinity();
      return true;
    }
  if (text == "-.inf" || text == "-.Inf" || text == "-.INF") {
    out.kind = ConfigNode::Kind::floating;
    out.floating = -std::numeric_limits<double>::infinity();
    return true;
  }
  if (text == ".nan" || text == ".NaN" || text == ".NAN") {
    out.kind = ConfigNode::Kind::floating;
    out.floating = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  out.kind = ConfigNode::Kind::string;
  return true;
}

bool plain_text_stays_string(const std::string& text) {
  ConfigNode probe;
  std::string err;
  if (!resolve_plain_scalar(text, probe, &err)) return false;
  return probe.kind == ConfigNode::Kind::string;
}

}  // namespace loom::config
