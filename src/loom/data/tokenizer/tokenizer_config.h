// tokenizer_config.json: the special tokens a model names (bos, eos, pad, unk and the additional
// ones) and its chat template, as transformers reads them.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace loom::data {

struct TokenizerConfig {
  std::string path;  // "" when the folder has none
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;
  std::vector<std::string> additional_special_tokens;
  std::optional<std::string> chat_template;
};

// Reads `path`; a token given as an AddedToken object counts as its "content". A chat_template
// given as a list of {"name", "template"} takes the one named "default". DataError naming the
// file and field for anything malformed.
TokenizerConfig read_tokenizer_config(const std::string& path);

}  // namespace loom::data
