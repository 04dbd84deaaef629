// Jinja template source -> tokens, with the whitespace rules transformers renders chat templates
// under: trim_blocks and lstrip_blocks on, "-" markers stripping whitespace, one trailing newline
// of the template dropped, newlines normalized to "\n" (jinja2's defaults otherwise).
#pragma once

#include <string>
#include <vector>

namespace loom::data::jinja {

enum class TokenType { text, expression_open, expression_close, statement_open, statement_close, name, string,
                       integer, floating, op, end };

struct Token {
  TokenType type;
  std::string value;
  int line;  // 1-based line in the template
};

// DataError "line N: ..." for an unterminated tag, string or comment.
std::vector<Token> tokenize(const std::string& source);

}  // namespace loom::data::jinja
