// Pieces of user-facing messages that every layer reading configuration (optim, config) writes
// the same way: a float as YAML reads it back, and the "did you mean" hint for a misspelt name.
#pragma once

#include <string>
#include <vector>

namespace loom {

// Shortest text that reads back as the same double and always as a float, also under YAML 1.1
// (so `1e-05` is written `1.0e-05`): 0.9, 1.0, 1.0e-08, .inf, -.inf, .nan.
std::string format_float(double value);

// The candidates closest to `word` (ties in candidate order) that are likely typos of it.
std::vector<std::string> closest_matches(const std::string& word, const std::vector<std::string>& candidates);

// The candidate closest to `word` by edit distance (case-insensitive, a swap of two neighbours
// counts as one edit) if it is close enough to be a likely typo, else "".
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

// "; did you mean 'x'?" (or "'x' or 'y'" for a tie), or "" when nothing is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

// A JSON library error's message without the library's tag ("[json.exception.parse_error.101] "):
// "parse error at line 1, column 25: syntax error while parsing object key - unexpected end of
// input; expected string literal". Loom's messages name the file and the fix around it.
std::string json_error_text(const std::string& what);

}  // namespace loom
