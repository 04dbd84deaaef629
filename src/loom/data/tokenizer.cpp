#include "loom/data/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/data/jsonl_reader.h"

namespace loom::data {

Tokenizer::Tokenizer(const std::string& model_path)
    : path_(model_path), processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  std::error_code ec;
  LOOM_CHECK(std::filesystem::is_regular_file(model_path, ec), DataError, "tokenizer model ", model_path,
             " does not exist (train one with `loom tokenizer train`)");
  const auto status = processor_->Load(model_path);
  LOOM_CHECK(status.ok(), DataError, "cannot load the SentencePiece model ", model_path, ": ",
             status.ToString());
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int64_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  LOOM_CHECK(status.ok(), DataError, "tokenizer ", path_, ": cannot encode text: ", status.ToString());
  return std::vector<int64_t>(ids.begin(), ids.end());
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> narrow(ids.begin(), ids.end());
  std::string text;
  const auto status = processor_->Decode(narrow, &text);
  LOOM_CHECK(status.ok(), DataError, "tokenizer ", path_, ": cannot decode: ", status.ToString());
  return text;
}

int64_t Tokenizer::vocab_size() const { return processor_->GetPieceSize(); }
int64_t Tokenizer::eod_id() const { return processor_->eos_id(); }
int64_t Tokenizer::pad_id() const { return processor_->pad_id(); }
int64_t Tokenizer::bos_id() const { return processor_->bos_id(); }
int64_t Tokenizer::unk_id() const { return processor_->unk_id(); }
std::string Tokenizer::id_to_piece(int64_t id) const { return processor_->IdToPiece(static_cast<int>(id)); }

namespace {

// SentencePiece drops training lines longer than max_sentence_length bytes; cut at whitespace.
void write_training_lines(std::ofstream& out, const std::string& text, size_t limit) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    while (!line.empty()) {
      size_t take = line.size();
      if (take > limit) {
        take = line.rfind(' ', limit);
        if (take == std::string_view::npos || take == 0) take = limit;
        while (take > 0 && take < line.size() && (static_cast<unsigned char>(line[take]) & 0xC0) == 0x80) --take;
        if (take == 0) take = limit;  // never loop: one oversized word is cut mid-character
      }
      std::string_view piece = line.substr(0, take);
      if (piece.find_first_not_of(" \t\r") != std::string_view::npos) out << piece << '\n';
      line.remove_prefix(take);
      while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    }
    start = end + 1;
  }
}

}  // namespace

std::string train_tokenizer(const TokenizerTrainOptions& o) {
  LOOM_CHECK(!o.model_prefix.empty(), ValueError, "--model-prefix is required");
  LOOM_CHECK(o.vocab_size >= 16, ValueError, "--vocab-size must be at least 16, got ", o.vocab_size);
  const std::filesystem::path prefix(o.model_prefix);
  if (prefix.has_parent_path()) std::filesystem::create_directories(prefix.parent_path());
  const std::string text_path = o.model_prefix + ".train.txt";
  constexpr size_t kMaxLine = 4000;
  int64_t documents = 0;
  {
    std::ofstream out(text_path, std::ios::binary);
    LOOM_CHECK(out.good(), IOError, "cannot write ", text_path);
    JsonlReader reader(o.input);
    std::string line;
    int64_t line_number = 0;
    while (reader.next(line, line_number)) {
      const auto record = parse_json_line(line, o.input, line_number);
      for (const auto& key : o.json_keys) {
        for (const auto& sentence : json_texts(record, key, o.input, line_number)) {
          write_training_lines(out, sentence, kMaxLine);
        }
      }
      ++documents;
    }
    LOOM_CHECK(out.good(), IOError, "cannot write ", text_path, " (disk full?)");
  }
  LOOM_CHECK(documents > 0, DataError, o.input, ": no JSON lines to train a tokenizer on");
  std::unordered_map<std::string, std::string> args = {
      {"input", text_path},
      {"model_prefix", o.model_prefix},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.model_type},
      {"character_coverage", std::to_string(o.character_coverage)},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"pad_id", std::to_string(o.pad_id)},
      {"num_threads", std::to_string(o.num_threads)},
      {"max_sentence_length", std::to_string(kMaxLine * 2)},
      {"minloglevel", "1"},
  };
  if (o.input_sentence_size > 0) {
    args["input_sentence_size"] = std::to_string(o.input_sentence_size);
    args["shuffle_input_sentence"] = "true";
  }
  log::info("training a ", o.model_type, " SentencePiece model of ", o.vocab_size, " pieces on ", documents,
            " documents from ", o.input);
  const auto status = sentencepiece::SentencePieceTrainer::Train(args);
  std::error_code ec;
  std::filesystem::remove(text_path, ec);
  LOOM_CHECK(status.ok(), DataError, "SentencePiece training failed: ", status.ToString(),
             " (a vocabulary larger than the text supports fails: lower --vocab-size)");
  return o.model_prefix + ".model";
}

}  // namespace loom::data
