// One tokenizer interface over the files models ship: a SentencePiece `.model`, or a Hugging Face
// `tokenizer.json` (with its `tokenizer_config.json` for the special tokens and chat template).
// Preprocessing, generation and fine-tuning all go through it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::data {

class ChatTemplate;
struct TokenizerConfig;

// Where each token came from: [begin, end) byte offsets into the text given to encode (before
// normalization). Tokens the post-processor adds cover an empty span: at 0 before the text (a
// BOS), at its end after it. A fine-tuning loss mask maps the assistant's character spans of a
// rendered chat to tokens with these.
struct TokenSpan {
  size_t begin = 0;
  size_t end = 0;
};

struct Encoding {
  std::vector<int64_t> ids;
  std::vector<TokenSpan> spans;  // one per id
};

struct ChatOptions {
  bool add_generation_prompt = false;
  // More template variables (`tools`, `enable_thinking`, `documents`, ...), an object.
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
};

class Tokenizer {
 public:
  virtual ~Tokenizer();

  // Thread-safe. add_special_tokens applies the file's post-processing (a BOS where it says so);
  // text that is not valid UTF-8 is a DataError naming the byte offset.
  virtual Encoding encode_with_spans(std::string_view text, bool add_special_tokens = true) const = 0;
  virtual std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // DataError for an id outside the vocabulary; skip_special_tokens drops special tokens.
  virtual std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const = 0;
  // What a model generated, special tokens skipped: ids the tokenizer does not have (the rows a
  // model pads its vocabulary with) read "<id:N>" instead of ending the decode with an error.
  // With `context` (the prompt), the text the ids add after it: decoders read their neighbours
  // (SentencePiece drops the leading space of a text, so "said" + "▁the" decoded apart loses the
  // space), so the last few context tokens are decoded with the ids and their own text removed.
  std::string decode_generated(const std::vector<int64_t>& ids, const std::vector<int64_t>& context = {}) const;

  // One past the largest id, special tokens included (the .bin token dtype is chosen by it).
  virtual int64_t vocab_size() const = 0;
  virtual std::string id_to_token(int64_t id) const = 0;
  virtual std::optional<int64_t> token_to_id(std::string_view token) const = 0;

  // -1 when the tokenizer has none. eos is also the end-of-document (EOD) id of pretraining data.
  int64_t bos_id() const { return bos_id_; }
  int64_t eos_id() const { return eos_id_; }
  int64_t eod_id() const { return eos_id_; }
  int64_t pad_id() const { return pad_id_; }
  int64_t unk_id() const { return unk_id_; }

  // The chat_template of tokenizer_config.json rendered with `messages` (a list of
  // {"role", "content", ...} objects), the special tokens and options.variables, as transformers'
  // apply_chat_template renders it. DataError when there is no template or it fails.
  bool has_chat_template() const { return chat_template_ != nullptr; }
  std::string apply_chat_template(const nlohmann::ordered_json& messages, const ChatOptions& options = {}) const;

  // "sentencepiece" or "tokenizer.json", and the file it was loaded from.
  virtual std::string kind() const = 0;
  const std::string& path() const { return path_; }

 protected:
  Tokenizer();
  // Special ids and chat template from tokenizer_config.json (its tokens looked up with
  // token_to_id); ids it does not name keep what the subclass set.
  void configure(const TokenizerConfig& config);
  std::string path_;
  int64_t bos_id_ = -1;
  int64_t eos_id_ = -1;
  int64_t pad_id_ = -1;
  int64_t unk_id_ = -1;
  std::shared_ptr<const ChatTemplate> chat_template_;
  nlohmann::ordered_json template_tokens_ = nlohmann::ordered_json::object();  // bos_token, ...
};

// Loads the tokenizer at `path`: a tokenizer.json, a SentencePiece .model, or a folder holding
// either (tokenizer.json first) and usually tokenizer_config.json. The file's content decides,
// not its name; anything else is a DataError saying what was found and what is expected.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

}  // namespace loom::data
