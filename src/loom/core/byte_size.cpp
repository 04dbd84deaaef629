#include "loom/core/byte_size.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>
#include <utility>

namespace loom {

namespace {

std::string lower_trimmed(std::string_view text) {
  std::string s;
  for (char c : text) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t start = 0;
  while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
  return s.substr(start);
}

std::optional<double> unit_scale(const std::string& unit) {
  static const std::array<std::pair<const char*, double>, 14> kUnits = {{
      {"", 1.0},       {"b", 1.0},                                                        // bytes
      {"k", 0x1p10},   {"m", 0x1p20},   {"g", 0x1p30},   {"t", 0x1p40},                 // binary
      {"kib", 0x1p10}, {"mib", 0x1p20}, {"gib", 0x1p30}, {"tib", 0x1p40},               // binary
      {"kb", 1e3},     {"mb", 1e6},     {"gb", 1e9},     {"tb", 1e12},                  // decimal
  }};
  for (const auto& [name, scale] : kUnits)
    if (unit == name) return scale;
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> parse_byte_size(std::string_view text) {
  const std::string s = lower_trimmed(text);
  size_t end = 0;
  while (end < s.size() && (std::isdigit(static_cast<unsigned char>(s[end])) || s[end] == '.')) ++end;
  double value = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + end, value);
  if (end == 0 || ec != std::errc() || ptr != s.data() + end) return std::nullopt;
  size_t unit_start = end;
  while (unit_start < s.size() && s[unit_start] == ' ') ++unit_start;
  const std::optional<double> scale = unit_scale(s.substr(unit_start));
  if (!scale || !(value > 0)) return std::nullopt;
  const double bytes = value * *scale;
  if (!std::isfinite(bytes) || bytes > 9.0e18 || bytes < 1) return std::nullopt;
  return static_cast<int64_t>(std::llround(bytes));
}

}  // namespace loom
