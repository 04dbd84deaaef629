// A Hugging Face tokenizer.json applied as HF tokenizers' Tokenizer::encode and ::decode do:
// added tokens split out of the raw text, normalizer, added tokens of the normalized text,
// pre-tokenizer, BPE per word, post-processor; decoding through the file's decoder.
#pragma once

#include <memory>

#include "loom/data/tokenizer/added_tokens.h"
#include "loom/data/tokenizer/bpe.h"
#include "loom/data/tokenizer/hf_decoder.h"
#include "loom/data/tokenizer/hf_normalizer.h"
#include "loom/data/tokenizer/hf_pre_tokenizer.h"
#include "loom/data/tokenizer/tokenizer.h"
#include "loom/data/tokenizer/tokenizer_config.h"

namespace loom::data {

class HfTokenizer final : public Tokenizer {
 public:
  // DataError naming the file and field for anything Loom cannot apply exactly.
  HfTokenizer(const std::string& json_path, const TokenizerConfig& config);
  ~HfTokenizer() override;

  Encoding encode_with_spans(std::string_view text, bool add_special_tokens = true) const override;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }
  std::string id_to_token(int64_t id) const override;
  std::optional<int64_t> token_to_id(std::string_view token) const override;
  std::string kind() const override { return "tokenizer.json"; }

 private:
  void load(const nlohmann::json& root);
  void read_added_tokens(const nlohmann::json& list, const JsonPlace& at);
  // Encodes text[begin, end) of the raw input, which holds no raw-matched added token.
  void encode_segment(std::string_view text, size_t begin, size_t end, Encoding& out) const;
  void encode_words(const NormalizedText& normalized, size_t begin, size_t end, size_t origin, Encoding& out) const;

  HfNormalizer normalizer_;
  HfPreTokenizer pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  HfPostProcessor post_processor_;
  HfDecoder decoder_;
  std::vector<AddedToken> added_tokens_;
  AddedTokenMatcher raw_added_, normalized_added_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> special_;  // per id: an added token marked special
  StringIdMap added_ids_;
};

}  // namespace loom::data
