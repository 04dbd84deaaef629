#include "loom/data/tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cctype>

#include "loom/core/error.h"
#include "loom/data/tokenizer/unicode.h"

namespace loom::data::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// jinja2 reads templates with newline_sequence "\n" and keep_trailing_newline off.
std::string normalize_source(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(const std::string& source) : src_(normalize_source(source)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t open = find_tag(pos_);
      emit_text(src_.substr(pos_, open - pos_));
      line_ += count_lines(pos_, open);
      pos_ = open;
      if (pos_ >= src_.size()) break;
      const char kind = src_[pos_ + 1];
      const bool strip_before = pos_ + 2 < src_.size() && src_[pos_ + 2] == '-';
      const bool keep_before = pos_ + 2 < src_.size() && src_[pos_ + 2] == '+';
      if (strip_before) {
        rstrip_last_text();
      } else if (kind != '{' && !keep_before) {
        lstrip_block(pos_);
      }
      pos_ += (strip_before || keep_before) ? 3 : 2;
      if (kind == '#') {
        comment();
      } else {
        tag(kind);
      }
    }
    tokens_.push_back({TokenType::end, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  void emit_text(std::string text) {
    if (lstrip_next_) {
      size_t k = 0;
      while (k < text.size() && is_space(text[k])) ++k;
      text.erase(0, k);
    } else if (trim_newline_ && !text.empty() && text[0] == '\n') {
      text.erase(0, 1);
    }
    lstrip_next_ = trim_newline_ = false;
    tokens_.push_back({TokenType::text, text, line_});
  }

  int count_lines(size_t from, size_t to) const {
    int n = 0;
    for (size_t i = from; i < to && i < src_.size(); ++i) n += src_[i] == '\n';
    return n;
  }

  void rstrip_last_text() {
    if (tokens_.empty() || tokens_.back().type != TokenType::text) return;
    std::string& t = tokens_.back().value;
    while (!t.empty() && is_space(t.back())) t.pop_back();
  }

  // lstrip_blocks: spaces and tabs between the start of a line and a block or comment tag go.
  void lstrip_block(size_t tag_start) {
    size_t k = tag_start;
    while (k > 0 && (src_[k - 1] == ' ' || src_[k - 1] == '\t')) --k;
    if (k != 0 && src_[k - 1] != '\n') return;
    if (tokens_.empty() || tokens_.back().type != TokenType::text) return;
    std::string& t = tokens_.back().value;
    size_t strip = tag_start - k;
    while (strip > 0 && !t.empty() && (t.back() == ' ' || t.back() == '\t')) t.pop_back(), --strip;
  }

  void comment() {
    const size_t close = src_.find("#}", pos_);
    LOOM_CHECK(close != std::string::npos, DataError, "line ", line_, ": a comment {# is never closed with #}");
    const bool strip_after = close > pos_ && src_[close - 1] == '-';
    line_ += count_lines(pos_, close);
    pos_ = close + 2;
    after_tag(strip_after, true);
  }

  void after_tag(bool strip_after, bool block) {
    if (strip_after) lstrip_next_ = true;
    else if (block) trim_newline_ = true;  // trim_blocks
  }

  void tag(char kind) {
    const bool expression = kind == '{';
    tokens_.push_back({expression ? TokenType::expression_open : TokenType::statement_open, "", line_});
    int depth = 0;  // brackets opened inside the tag, so "}}" of a dict literal does not close it
    while (true) {
      LOOM_CHECK(pos_ < src_.size(), DataError, "line ", line_, ": a ", expression ? "{{" : "{%",
                 " tag is never closed");
      const char c = src_[pos_];
      if (c == '\n') ++line_;
      if (is_space(c)) {
        ++pos_;
        continue;
      }
      const char closer = expression ? '}' : '%';
      const bool minus_close = c == '-' && pos_ + 2 < src_.size() && src_[pos_ + 1] == closer && src_[pos_ + 2] == '}';
      const bool plus_close = c == '+' && !expression && pos_ + 2 < src_.size() && src_[pos_ + 1] == '%' && src_[pos_ + 2] == '}';
      if (depth == 0 && (minus_close || plus_close || (c == closer && pos_ + 1 < src_.size() && src_[pos_ + 1] == '}'))) {
        pos_ += (minus_close || plus_close) ? 3 : 2;
        tokens_.push_back({expression ? TokenType::expression_close : TokenType::statement_close, "", line_});
        after_tag(minus_close, !expression && !plus_close);
        return;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        name();
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        number();
      } else if (c == '\'' || c == '"') {
        string(c);
      } else {
        op(depth);
      }
    }
  }

  void name() {
    const size_t start = pos_;
    while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
    tokens_.push_back({TokenType::name, src_.substr(start, pos_ - start), line_});
  }

  void number() {
    const size_t start = pos_;
    bool floating = false;
    while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      floating = true;
      ++pos_;
      while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      floating = true;
      ++pos_;
      if (pos_ < src_.size() && (src_[pos_] == '+' || src_[pos_] == '-')) ++pos_;
      while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
    }
    std::string text;
    for (size_t i = start; i < pos_; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    tokens_.push_back({floating ? TokenType::floating : TokenType::integer, text, line_});
  }

  // Python string literal escapes, as jinja2 decodes them ("unicode-escape").
  void string(char quote) {
    const int line = line_;
    ++pos_;
    std::string out;
    while (true) {
      LOOM_CHECK(pos_ < src_.size(), DataError, "line ", line, ": a string literal is never closed");
      const char c = src_[pos_++];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\' || pos_ >= src_.size()) {
        out += c;
        continue;
      }
      const char e = src_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case '0': out += '\0'; break;
        case '\\': case '\'': case '"': out += e; break;
        case '\n': break;
        case 'x': case 'u': case 'U': {
          const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          const std::string hex = src_.substr(pos_, digits);
          const bool valid = hex.size() == digits && std::all_of(hex.begin(), hex.end(), [](char h) {
            return std::isxdigit(static_cast<unsigned char>(h));
          });
          LOOM_CHECK(valid, DataError, "line ", line, ": the \\", std::string(1, e), " escape needs ", digits,
                     " hex digits");
          const auto code_point = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
          LOOM_CHECK(code_point <= 0x10FFFF && (code_point < 0xD800 || code_point > 0xDFFF), DataError, "line ", line,
                     ": \\", std::string(1, e), hex, " is not a Unicode character");
          append_utf8(out, code_point);
          pos_ += digits;
          break;
        }
        default: out += '\\'; out += e;  // Python keeps unknown escapes as written
      }
    }
    tokens_.push_back({TokenType::string, out, line});
  }

  void op(int& depth) {
    static const char* const two[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* t : two) {
      if (src_.compare(pos_, 2, t) == 0) {
        tokens_.push_back({TokenType::op, t, line_});
        pos_ += 2;
        return;
      }
    }
    const char c = src_[pos_];
    LOOM_CHECK(std::string_view("+-*/%~<>=()[]{}.,:|").find(c) != std::string_view::npos, DataError, "line ", line_,
               ": unexpected character '", std::string(1, c), "' in a tag");
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    tokens_.push_back({TokenType::op, std::string(1, c), line_});
    ++pos_;
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool lstrip_next_ = false;
  bool trim_newline_ = false;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(source).run(); }

}  // namespace loom::data::jinja
