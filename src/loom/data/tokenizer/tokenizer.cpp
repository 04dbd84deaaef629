#include "loom/data/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "loom/core/error.h"
#include "loom/data/tokenizer/chat_template.h"
#include "loom/data/tokenizer/hf_tokenizer.h"
#include "loom/data/tokenizer/sentencepiece_tokenizer.h"
#include "loom/data/tokenizer/tokenizer_config.h"

namespace loom::data {

namespace fs = std::filesystem;

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

std::vector<int64_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return encode_with_spans(text, add_special_tokens).ids;
}

namespace {

// The known ids decode together (a decoder's rules, such as a word's leading space, read the
// context); each unknown id's mark goes where the text decoded before it ends.
std::string decode_marking_unknown(const Tokenizer& t, const std::vector<int64_t>& ids) {
  std::vector<int64_t> known;
  std::vector<std::pair<size_t, int64_t>> marks;
  for (int64_t id : ids) {
    if (id >= 0 && id < t.vocab_size()) known.push_back(id);
    else marks.emplace_back(t.decode(known, true).size(), id);
  }
  std::string text = t.decode(known, true);
  for (auto it = marks.rbegin(); it != marks.rend(); ++it) {
    // The ids after a mark can change the text before it (a byte-fallback run completes a
    // character): the mark goes at the next character boundary, never inside one.
    size_t at = std::min(it->first, text.size());
    while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
    text.insert(at, "<id:" + std::to_string(it->second) + ">");
  }
  return text;
}

}  // namespace

std::string Tokenizer::decode_generated(const std::vector<int64_t>& ids, const std::vector<int64_t>& context) const {
  // A few tokens of context are enough for every decoder rule that looks across tokens.
  constexpr size_t kContext = 8;
  if (context.empty()) return decode_marking_unknown(*this, ids);
  std::vector<int64_t> joined(context.end() - static_cast<std::ptrdiff_t>(std::min(kContext, context.size())),
                              context.end());
  const std::string before = decode_marking_unknown(*this, joined);
  joined.insert(joined.end(), ids.begin(), ids.end());
  const std::string text = decode_marking_unknown(*this, joined);
  // The context's text changes when the ids complete its last character: then apart.
  if (text.compare(0, before.size(), before) == 0) return text.substr(before.size());
  return decode_marking_unknown(*this, ids);
}

void Tokenizer::configure(const TokenizerConfig& config) {
  const std::string where = config.path.empty() ? path_ : config.path;
  auto id_of = [&](const std::optional<std::string>& token, const char* field, int64_t& id) {
    if (!token) return;
    const auto found = token_to_id(*token);
    LOOM_CHECK(found.has_value(), DataError, where, ": ", field, " \"", *token, "\" is not a token of ", path_,
               "; the two files do not belong together");
    id = *found;
    template_tokens_[field] = *token;
  };
  id_of(config.bos_token, "bos_token", bos_id_);
  id_of(config.eos_token, "eos_token", eos_id_);
  id_of(config.unk_token, "unk_token", unk_id_);
  id_of(config.pad_token, "pad_token", pad_id_);
  if (!config.additional_special_tokens.empty()) {
    template_tokens_["additional_special_tokens"] = config.additional_special_tokens;
  }
  if (config.chat_template) chat_template_ = std::make_shared<ChatTemplate>(*config.chat_template, where);
}

std::string Tokenizer::apply_chat_template(const nlohmann::ordered_json& messages, const ChatOptions& options) const {
  LOOM_CHECK(chat_template_ != nullptr, DataError, "tokenizer ", path_,
             " has no chat template: pass the model's folder (its tokenizer_config.json holds \"chat_template\")");
  LOOM_CHECK(messages.is_array(), DataError, "\"messages\" must be a list of {\"role\": ..., \"content\": ...} objects");
  LOOM_CHECK(options.variables.is_object(), DataError, "chat template variables must be a JSON object");
  // What transformers passes: the special tokens map, messages, add_generation_prompt, then the
  // caller's variables (tools, enable_thinking, ...).
  nlohmann::ordered_json variables = template_tokens_;
  variables["messages"] = messages;
  variables["add_generation_prompt"] = options.add_generation_prompt;
  for (const auto& [name, value] : options.variables.items()) variables[name] = value;
  return chat_template_->render(variables);
}

namespace {

bool looks_like_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char c = 0;
  while (in.get(c)) {
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return c == '{';
  }
  return false;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  std::error_code ec;
  LOOM_CHECK(fs::exists(path, ec), DataError, "tokenizer ", path,
             " does not exist (pass a tokenizer.json, a SentencePiece .model, or a model folder holding one)");
  fs::path file = path;
  fs::path config_path;
  if (fs::is_directory(path, ec)) {
    const fs::path dir = path;
    file = fs::exists(dir / "tokenizer.json") ? dir / "tokenizer.json" : dir / "tokenizer.model";
    LOOM_CHECK(fs::exists(file), DataError, "folder ", path,
               " holds neither tokenizer.json nor tokenizer.model; pass the model's folder or the file itself");
  }
  // A tokenizer_config.json beside the file names the special tokens and the chat template.
  if (fs::exists(file.parent_path() / "tokenizer_config.json")) config_path = file.parent_path() / "tokenizer_config.json";
  const TokenizerConfig config = config_path.empty() ? TokenizerConfig{} : read_tokenizer_config(config_path.string());
  if (looks_like_json(file.string())) return std::make_unique<HfTokenizer>(file.string(), config);
  return std::make_unique<SentencePieceTokenizer>(file.string(), config);
}

}  // namespace loom::data
