// tokenizer.json "pre_tokenizer": cuts normalized text into the words BPE encodes one by one.
// Implemented: Split (regex or string pattern, every delimiter behaviour, invert), Digits,
// ByteLevel (its GPT-2 regex and prefix space) and Sequence; ByteLevel must come last, where the
// three models put it. Anything else is a DataError naming it.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/data/tokenizer/json_fields.h"
#include "loom/data/tokenizer/regex.h"

namespace loom::data {

// A word: text[begin, end) of the normalized text, preceded by a space that ByteLevel's
// add_prefix_space inserted when space_before is set.
struct PreToken {
  size_t begin = 0;
  size_t end = 0;
  bool space_before = false;
};

class HfPreTokenizer {
 public:
  HfPreTokenizer();
  // `config` is the "pre_tokenizer" value (null: the whole text is one word).
  HfPreTokenizer(const nlohmann::json& config, const JsonPlace& at);
  ~HfPreTokenizer();
  HfPreTokenizer(HfPreTokenizer&&) noexcept;
  HfPreTokenizer& operator=(HfPreTokenizer&&) noexcept;

  // Appends the words of text[begin, end) to `words`. Thread-safe.
  void split(std::string_view text, size_t begin, size_t end, std::vector<PreToken>& words) const;
  // Whether the words are byte-level encoded before BPE (a ByteLevel pre-tokenizer is present).
  bool byte_level() const { return byte_level_; }

 private:
  struct Step;
  void add(const nlohmann::json& config, const JsonPlace& at);
  std::vector<std::unique_ptr<Step>> steps_;
  bool byte_level_ = false;
};

}  // namespace loom::data
