#include "loom/config/diagnostics.h"

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

}  // namespace loom::config
