// SentencePiece tokenizer: encoding for preprocessing, the special ids the dataset options refer
// to (eod = the model's end-of-sequence id, as Megatron's SentencePiece tokenizers define it),
// and training a model from JSON-lines text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece { class SentencePieceProcessor; }

namespace loom::data {

class Tokenizer {
 public:
  // Loads a SentencePiece .model; DataError naming the path when it is missing or invalid.
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Thread-safe (SentencePiece encoding is const).
  std::vector<int64_t> encode(std::string_view text) const;
  std::string decode(const std::vector<int64_t>& ids) const;
  int64_t vocab_size() const;
  int64_t eod_id() const;  // end-of-document = eos; -1 when the model has none
  int64_t pad_id() const;  // -1 when the model has none
  int64_t bos_id() const;
  int64_t unk_id() const;
  std::string id_to_piece(int64_t id) const;
  const std::string& model_path() const { return path_; }

 private:
  std::string path_;
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
