// The pre-tokenizer regexes of tokenizer.json, run by PCRE2 (Unicode properties, JIT). HF
// tokenizers compiles them with Oniguruma in Ruby syntax; the few escapes whose meaning differs
// are rewritten to Oniguruma's (see translate_oniguruma in regex.cpp), the rest are the same.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace loom::data {

struct Match {
  size_t begin = 0;
  size_t end = 0;
};

class Regex {
 public:
  // `where` names the file and field for errors ("tokenizer.json: pre_tokenizer...pattern").
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every non-overlapping match in `text` (valid UTF-8), left to right, as Oniguruma's find_iter
  // reports them (an empty match right after a match is skipped). Thread-safe.
  void find_all(std::string_view text, std::vector<Match>& matches) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  std::string where_;
  void* code_ = nullptr;  // pcre2_code_8
  bool jit_ = false;
};

// The PCRE2 pattern for an Oniguruma one (exposed for tests); DataError naming `where` for a
// construct whose meaning would differ.
std::string translate_oniguruma(const std::string& pattern, const std::string& where);

}  // namespace loom::data
