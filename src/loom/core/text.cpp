#include "loom/core/text.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

namespace loom {

std::string format_float(double value) {
  if (std::isnan(value)) return ".nan";
  if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, value);
  std::string s(buf, ptr);
  const auto exp = s.find_first_of("eE");
  const std::string mantissa = s.substr(0, exp);
  if (mantissa.find('.') == std::string::npos) {
    if (exp == std::string::npos)
      s += ".0";
    else
      s = mantissa + ".0" + s.substr(exp);
  }
  return s;
}

namespace {

std::string lower(const std::string& s) {
  std::string out = s;
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Optimal string alignment distance: insert, delete, substitute, swap neighbours.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i)
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

}  // namespace

std::vector<std::string> closest_matches(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string w = lower(word);
  std::vector<std::string> best;
  std::size_t best_distance = std::string::npos;
  for (const auto& c : candidates) {
    if (c == word) continue;
    // Short names tolerate one or two edits, long ones a few more; beyond that a guess is noise.
    const std::size_t allowed = std::max<std::size_t>(2, std::min(w.size(), c.size()) / 3);
    const std::size_t length_gap = w.size() > c.size() ? w.size() - c.size() : c.size() - w.size();
    if (length_gap > allowed) continue;  // the distance is at least the gap; also bounds the work
    const std::size_t dist = edit_distance(w, lower(c));
    if (dist > allowed) continue;
    if (dist < best_distance) {
      best_distance = dist;
      best.clear();
    }
    if (dist == best_distance && std::find(best.begin(), best.end(), c) == best.end()) best.push_back(c);
  }
  return best;
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  auto best = closest_matches(word, candidates);
  return best.empty() ? "" : best.front();
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  auto best = closest_matches(word, candidates);
  if (best.empty()) return "";
  std::string out = "; did you mean '" + best[0] + "'";
  if (best.size() > 1) out += " or '" + best[1] + "'";
  return out + "?";
}

std::string json_error_text(const std::string& what) {
  if (what.rfind("[json.exception.", 0) != 0) return what;
  const size_t end = what.find("] ");
  return end == std::string::npos ? what : what.substr(end + 2);
}

}  // namespace loom
