// tokenizer.json "added_tokens": tokens matched in the text before anything else, so "<|im_end|>"
// typed in a document is the one special id, never its characters. Matching is leftmost-longest,
// as HF tokenizers' Aho-Corasick matcher is configured.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::data {

struct AddedToken {
  uint32_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;  // matched in the normalized text rather than the raw text
};

struct AddedMatch {
  size_t begin, end;
  uint32_t id;
};

class AddedTokenMatcher {
 public:
  void add(std::string_view content, uint32_t id);
  bool empty() const { return nodes_.size() <= 1; }
  // Every match in `text`, left to right, none overlapping.
  void find_all(std::string_view text, std::vector<AddedMatch>& matches) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, uint32_t>> children;  // byte -> node
    int64_t id = -1;                                           // token ending here
  };
  uint32_t child(uint32_t node, unsigned char byte) const;  // 0 when absent
  std::vector<Node> nodes_{1};
  std::array<bool, 256> first_byte_{};
};

}  // namespace loom::data
