#include "loom/data/tokenizer/added_tokens.h"

#include <algorithm>

namespace loom::data {

uint32_t AddedTokenMatcher::child(uint32_t node, unsigned char byte) const {
  for (const auto& [b, next] : nodes_[node].children) {
    if (b == byte) return next;
  }
  return 0;
}

void AddedTokenMatcher::add(std::string_view content, uint32_t id) {
  if (content.empty()) return;
  first_byte_[static_cast<unsigned char>(content[0])] = true;
  uint32_t node = 0;
  for (const char c : content) {
    const auto byte = static_cast<unsigned char>(c);
    uint32_t next = child(node, byte);
    if (next == 0) {
      next = static_cast<uint32_t>(nodes_.size());
      nodes_[node].children.emplace_back(byte, next);
      nodes_.emplace_back();
    }
    node = next;
  }
  nodes_[node].id = id;
}

void AddedTokenMatcher::find_all(std::string_view text, std::vector<AddedMatch>& matches) const {
  matches.clear();
  if (empty()) return;
  size_t i = 0;
  while (i < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    uint32_t node = 0;
    size_t best_end = 0;
    int64_t best_id = -1;
    for (size_t k = i; k < text.size(); ++k) {
      node = child(node, static_cast<unsigned char>(text[k]));
      if (node == 0) break;
      if (nodes_[node].id >= 0) {
        best_end = k + 1;
        best_id = nodes_[node].id;
      }
    }
    if (best_id >= 0) {
      matches.push_back({i, best_end, static_cast<uint32_t>(best_id)});
      i = best_end;
    } else {
      ++i;
    }
  }
}

}  // namespace loom::data
