// A model's chat_template (tokenizer_config.json), compiled once and rendered per conversation by
// Loom's Jinja interpreter (jinja/), byte for byte what transformers' apply_chat_template renders
// for the constructs it supports; any other construct is a DataError naming it and its line.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "loom/data/tokenizer/jinja/ast.h"

namespace loom::data {

class ChatTemplate {
 public:
  // `origin` names where the template came from, for errors ("m/tokenizer_config.json").
  ChatTemplate(const std::string& source, const std::string& origin);
  // `variables`: messages, add_generation_prompt, bos_token, eos_token and any others, an object.
  std::string render(const nlohmann::ordered_json& variables) const;

 private:
  std::string origin_;
  jinja::Body body_;
};

}  // namespace loom::data
