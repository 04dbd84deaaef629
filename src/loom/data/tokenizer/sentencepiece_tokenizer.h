// SentencePiece models (.model) behind the Tokenizer interface, and training one from JSON-lines
// text (`loom tokenizer train`). eod = the model's end-of-sequence id, as Megatron's SentencePiece
// tokenizers define it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/data/tokenizer/tokenizer.h"

namespace sentencepiece { class SentencePieceProcessor; }

namespace loom::data {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // DataError naming the path when it is missing or not a SentencePiece model. `config` (a
  // tokenizer_config.json beside the model, or empty) may rename the special tokens.
  SentencePieceTokenizer(const std::string& model_path, const TokenizerConfig& config);
  ~SentencePieceTokenizer() override;

  // SentencePiece adds no special tokens: add_special_tokens has no effect.
  Encoding encode_with_spans(std::string_view text, bool add_special_tokens = true) const override;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const override;
  int64_t vocab_size() const override;
  std::string id_to_token(int64_t id) const override;
  std::optional<int64_t> token_to_id(std::string_view token) const override;
  std::string kind() const override { return "sentencepiece"; }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

struct TokenizerTrainOptions {
  std::string input;                          // JSON lines
  std::vector<std::string> json_keys = {"text"};
  int64_t vocab_size = 8000;
  std::string model_prefix;                   // writes {prefix}.model and {prefix}.vocab
  std::string model_type = "bpe";             // bpe | unigram | char | word
  double character_coverage = 1.0;
  bool byte_fallback = true;                  // unknown characters become byte tokens, never <unk>
  int64_t pad_id = -1;                        // SentencePiece defaults: unk 0, bos 1, eos 2
  int64_t input_sentence_size = 2000000;      // lines sampled for training (0 = all)
  int64_t num_threads = 2;
};

// Extracts the text of every JSON line (long lines split at whitespace so SentencePiece does not
// skip them), trains, and writes the model. Returns the .model path.
std::string train_tokenizer(const TokenizerTrainOptions& options);

}  // namespace loom::data
