#include "loom/data/tokenizer/tokenizer_config.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "loom/core/error.h"

namespace loom::data {

namespace {

// transformers saves a token either as its string or as {"__type": "AddedToken", "content": ...}.
std::optional<std::string> token_string(const nlohmann::json& config, const std::string& key,
                                        const std::string& path) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  LOOM_THROW(DataError, path, ": \"", key, "\" must be a token string or an AddedToken object with \"content\", got ",
             it->dump());
}

std::optional<std::string> chat_template(const nlohmann::json& config, const std::string& path) {
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    // Several named templates: apply_chat_template uses "default" unless told otherwise.
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
    LOOM_THROW(DataError, path, ": \"chat_template\" is a list without a {\"name\": \"default\", \"template\": ...} "
               "entry; Loom renders the default template");
  }
  LOOM_THROW(DataError, path, ": \"chat_template\" must be a string or a list of named templates");
}

}  // namespace

TokenizerConfig read_tokenizer_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in.good(), IOError, "cannot read ", path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    LOOM_THROW(DataError, path, ": not valid JSON (byte ", e.byte, "); tokenizer_config.json must be the file "
               "saved with the model's tokenizer");
  }
  LOOM_CHECK(config.is_object(), DataError, path, ": expected a JSON object (a tokenizer_config.json)");
  TokenizerConfig out;
  out.path = path;
  out.bos_token = token_string(config, "bos_token", path);
  out.eos_token = token_string(config, "eos_token", path);
  out.pad_token = token_string(config, "pad_token", path);
  out.unk_token = token_string(config, "unk_token", path);
  if (const auto it = config.find("additional_special_tokens"); it != config.end() && !it->is_null()) {
    LOOM_CHECK(it->is_array(), DataError, path, ": \"additional_special_tokens\" must be a list");
    for (size_t i = 0; i < it->size(); ++i) {
      const nlohmann::json holder = {{"token", (*it)[i]}};
      const auto token = token_string(holder, "token", path + " (additional_special_tokens[" + std::to_string(i) + "])");
      if (token) out.additional_special_tokens.push_back(*token);
    }
  }
  out.chat_template = chat_template(config, path);
  return out;
}

}  // namespace loom::data
