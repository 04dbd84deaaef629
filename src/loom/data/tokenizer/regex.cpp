#include "loom/data/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "loom/core/error.h"
#include "loom/data/tokenizer/unicode.h"

namespace loom::data {

namespace {

// Oniguruma's \s is Unicode White_Space, which includes U+0085 (NEL); PCRE2's is \p{Z} and
// \t\n\v\f\r, without it. Its \w is Letter, Mark, Decimal_Number and Connector_Punctuation; its
// \h is a hex digit (PCRE2: horizontal space).
constexpr const char* kSpace = "\\s\\x{85}";
constexpr const char* kWord = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
constexpr const char* kHex = "0-9a-fA-F";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof(buffer)) < 0) return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buffer);
}

struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    // Long runs of spaces backtrack through `\s+(?!\S)`; the default 32 KiB JIT stack is too
    // small for them.
    stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
    if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

ThreadMatchState& match_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

std::string translate_oniguruma(const std::string& p, const std::string& where) {
  auto unsupported = [&](const std::string& what) {
    LOOM_THROW(DataError, where, ": the regex ", p, " uses ", what,
               ", whose Oniguruma meaning Loom does not reproduce; only patterns of Unicode properties, classes, "
               "groups, lookarounds and quantifiers are supported");
  };
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      switch (e) {
        case 's': out += in_class ? std::string(kSpace) : "[" + std::string(kSpace) + "]"; break;
        case 'S': if (in_class) unsupported("\\S inside a class"); out += "[^" + std::string(kSpace) + "]"; break;
        case 'w': out += in_class ? std::string(kWord) : "[" + std::string(kWord) + "]"; break;
        case 'W': if (in_class) unsupported("\\W inside a class"); out += "[^" + std::string(kWord) + "]"; break;
        case 'h': out += in_class ? std::string(kHex) : "[" + std::string(kHex) + "]"; break;
        case 'H': case 'b': case 'B': unsupported(std::string("\\") + e); break;
        case 'u':  // Oniguruma's \uHHHH
          if (i + 4 < p.size()) {
            out += "\\x{" + p.substr(i + 1, 4) + "}";
            i += 4;
          } else {
            unsupported("an incomplete \\u escape");
          }
          break;
        default: out += '\\'; out += e;
      }
      continue;
    }
    if (in_class) {
      if (c == '[') {
        if (i + 1 < p.size() && p[i + 1] == ':') {  // a POSIX bracket, [:alpha:]
          const size_t close = p.find(":]", i + 2);
          if (close == std::string::npos) unsupported("an unterminated POSIX bracket");
          out += p.substr(i, close + 2 - i);
          i = close + 1;
          continue;
        }
        unsupported("a nested character class");
      }
      if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') unsupported("class intersection (&&)");
      if (c == ']' && out.back() != '[' && !(out.size() >= 2 && out.substr(out.size() - 2) == "[^")) in_class = false;
      out += c;
      continue;
    }
    if (c == '[') in_class = true;
    if (c == '(' && i + 2 < p.size() && p[i + 1] == '?') {
      // Ruby's (?m) is dot-matches-newline, PCRE2's (?s).
      size_t k = i + 2;
      std::string flags;
      while (k < p.size() && std::string_view("imx-").find(p[k]) != std::string_view::npos) flags += p[k++];
      if (!flags.empty() && k < p.size() && (p[k] == ':' || p[k] == ')')) {
        for (char& f : flags) if (f == 'm') f = 's';
        out += "(?" + flags;
        i = k - 1;
        continue;
      }
    }
    out += c;
  }
  return out;
}

Regex::Regex(const std::string& pattern, const std::string& where) : pattern_(pattern), where_(where) {
  const std::string translated = translate_oniguruma(pattern, where);
  int error = 0;
  PCRE2_SIZE offset = 0;
  // Ruby syntax: ^ and $ match at line boundaries.
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options,
                                   &error, &offset, nullptr);
  LOOM_CHECK(code != nullptr, DataError, where, ": cannot compile the regex ", pattern, " (", pcre2_message(error),
             " near character ", offset, " of its PCRE2 form ", translated,
             "); the file's pattern must be a valid Oniguruma regex");
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all(std::string_view text, std::vector<Match>& matches) const {
  matches.clear();
  auto* code = static_cast<pcre2_code*>(code_);
  ThreadMatchState& state = match_state();
  LOOM_CHECK(state.data != nullptr && state.context != nullptr, DataError, "out of memory for regex matching");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  size_t last_end = std::string_view::npos;
  while (start <= text.size()) {
    // The text was checked once as UTF-8; PCRE2 would otherwise re-check it on every call.
    int rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && jit_) {
      rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, state.data,
                       state.context);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    LOOM_CHECK(rc >= 0, DataError, where_, ": matching the regex ", pattern_, " failed at byte ", start, " of a ",
               text.size(), "-byte text (", pcre2_message(rc), "); split the text into smaller documents");
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    const size_t b = ovector[0], e = ovector[1];
    if (b == e) {
      // Oniguruma's iterator skips an empty match that touches the previous one and steps one
      // character past every empty match.
      if (b != last_end) matches.push_back({b, e});
      if (b >= text.size()) break;
      start = b + utf8_length(static_cast<unsigned char>(text[b]));
      last_end = e;
      continue;
    }
    matches.push_back({b, e});
    start = e;
    last_end = e;
  }
}

}  // namespace loom::data
