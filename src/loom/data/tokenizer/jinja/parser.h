// Tokens -> the statement tree: the Jinja subset chat templates use. if/elif/else, for (with
// else and an inline if), set (names, namespace attributes, blocks), break, continue,
// transformers' generation block, and the expression grammar of jinja2 (precedence and all).
// Any other tag is a DataError naming it and its line.
#pragma once

#include <vector>

#include "loom/data/tokenizer/jinja/ast.h"
#include "loom/data/tokenizer/jinja/lexer.h"

namespace loom::data::jinja {

Body parse(const std::vector<Token>& tokens);

}  // namespace loom::data::jinja
