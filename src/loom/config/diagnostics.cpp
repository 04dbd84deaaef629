#include "loom/config/diagnostics.h"

#include <algorithm>
#include <cctype>

namespace loom::config {

void Diagnostics::index_marks(const ConfigNode& root) {
  auto marks = std::make_shared<SourceMarks>();
  index(*marks, root, "");
  marks_ = std::move(marks);
}

void Diagnostics::index(SourceMarks& marks, const ConfigNode& node, const std::string& path) {
  marks.values[path] = node.mark;
  if (node.is_map()) {
    for (const auto& e : node.entries) {
      const std::string p = child_path(path, e.key);
      index(marks, e.value, p);
      marks.keys[p] = e.key_mark;
    }
  } else if (node.is_list()) {
    for (std::size_t i = 0; i < node.items.size(); ++i) index(marks, node.items[i], index_path(path, i));
  }
}

SourceMark Diagnostics::mark_of(const std::string& path, bool key) const {
  const auto& values = marks_->values;
  if (key) {
    auto found = marks_->keys.find(path);
    if (found != marks_->keys.end() && !found->second.source.empty()) return found->second;
  }
  auto prefixes = path_prefixes(path);
  for (auto it = prefixes.rbegin(); it != prefixes.rend(); ++it) {
    auto found = values.find(*it);
    if (found != values.end() && !found->second.source.empty()) return found->second;
  }
  auto root = values.find("");
  if (root != values.end() && !root->second.source.empty()) {
    SourceMark m = root->second;
    m.line = m.column = 0;  // the whole file, not its first node
    return m;
  }
  return SourceMark{source_, 0, 0};
}

std::string Diagnostics::format(const SourceMark& mark, const std::string& path,
                                const std::string& message) const {
  std::string where = mark.source.empty() ? source_ : mark.str();
  return where + ": " + (path.empty() ? "" : path + ": ") + message;
}

void Diagnostics::error(const std::string& path, const std::string& message) {
  error_at(mark_of(path), path, message);
}

void Diagnostics::warn(const std::string& path, const std::string& message) {
  warn_at(mark_of(path), path, message);
}

void Diagnostics::key_error(const std::string& path, const std::string& message) {
  error_at(mark_of(path, true), path, message);
}

void Diagnostics::key_warn(const std::string& path, const std::string& message) {
  warn_at(mark_of(path, true), path, message);
}

void Diagnostics::error_at(const SourceMark& mark, const std::string& path, const std::string& message) {
  std::string line = format(mark, path, message);
  if (std::find(errors_.begin(), errors_.end(), line) == errors_.end()) errors_.push_back(line);
}

void Diagnostics::warn_at(const SourceMark& mark, const std::string& path, const std::string& message) {
  std::string line = format(mark, path, message);
  if (std::find(warnings_.begin(), warnings_.end(), line) == warnings_.end()) warnings_.push_back(line);
}

void Diagnostics::note(const std::string& message) {
  if (std::find(notes_.begin(), notes_.end(), message) == notes_.end()) notes_.push_back(message);
}

void Diagnostics::key_note(const std::string& path, const std::string& message) {
  note(format(mark_of(path, true), path, message));
}

std::string Diagnostics::positioned(const std::string& path, const std::string& message, bool key) const {
  return format(mark_of(path, key), "", message);
}

void Diagnostics::throw_if_errors() const {
  if (errors_.empty()) return;
  std::string all;
  for (std::size_t i = 0; i < errors_.size(); ++i) all += (i ? "\n" : "") + errors_[i];
  if (errors_.size() > 1)
    all += "\n(" + std::to_string(errors_.size()) + " configuration errors in " + source_ + ")";
  throw ConfigError(all);
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

}  // namespace loom::config
