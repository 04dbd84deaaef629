#include "loom/data/tokenizer/sentencepiece_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/data/jsonl_reader.h"
#include "loom/data/tokenizer/tokenizer_config.h"
#include "loom/data/tokenizer/unicode.h"

namespace loom::data {

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path, const TokenizerConfig& config)
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  path_ = model_path;
  std::error_code ec;
  LOOM_CHECK(std::filesystem::is_regular_file(model_path, ec), DataError, "tokenizer model ", model_path,
             " does not exist (train one with `loom tokenizer train`)");
  const auto status = processor_->Load(model_path);
  // SentencePiece's own message is about protobuf parsing; say what the file should have been.
  LOOM_CHECK(status.ok(), DataError, model_path, " is neither a Hugging Face tokenizer.json nor a SentencePiece "
             "model; pass the model's tokenizer.json, its tokenizer.model, or its folder");
  bos_id_ = processor_->bos_id();
  eos_id_ = processor_->eos_id();
  pad_id_ = processor_->pad_id();
  unk_id_ = processor_->unk_id();
  configure(config);
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

Encoding SentencePieceTokenizer::encode_with_spans(std::string_view text, bool) const {
  const size_t bad = invalid_utf8_offset(text);
  LOOM_CHECK(bad == std::string_view::npos, DataError, "text is not valid UTF-8 (byte ", bad, " of ", text.size(),
             "); tokenizer ", path_, " encodes Unicode text only: fix or drop the input");
  sentencepiece::ImmutableSentencePieceText pieces;
  const auto status = processor_->Encode(text, pieces.mutable_proto());
  LOOM_CHECK(status.ok(), DataError, "tokenizer ", path_, ": cannot encode text: ", status.message());
  Encoding out;
  for (size_t i = 0; i < pieces.pieces_size(); ++i) {
    const auto piece = pieces.pieces(static_cast<int>(i));
    out.ids.push_back(piece.id());
    out.spans.push_back({piece.begin(), piece.end()});
  }
  return out;
}

std::string SentencePieceTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::vector<int> narrow;
  narrow.reserve(ids.size());
  for (const int64_t id : ids) {
    LOOM_CHECK(id >= 0 && id < vocab_size(), DataError, "id ", id, " is not a token of ", path_, " (vocabulary of ",
               vocab_size(), "); were the ids made by another tokenizer?");
    if (skip_special_tokens && processor_->IsControl(static_cast<int>(id))) continue;
    narrow.push_back(static_cast<int>(id));
  }
  std::string text;
  const auto status = processor_->Decode(narrow, &text);
  LOOM_CHECK(status.ok(), DataError, "tokenizer ", path_, ": cannot decode: ", status.message());
  return text;
}

int64_t SentencePieceTokenizer::vocab_size() const { return processor_->GetPieceSize(); }

std::string SentencePieceTokenizer::id_to_token(int64_t id) const {
  LOOM_CHECK(id >= 0 && id < vocab_size(), DataError, "id ", id, " is outside the vocabulary of ", path_);
  return processor_->IdToPiece(static_cast<int>(id));
}

std::optional<int64_t> SentencePieceTokenizer::token_to_id(std::string_view token) const {
  const int id = processor_->PieceToId(token);
  // PieceToId answers unk for anything unknown; only the unknown piece itself maps there.
  if (id == processor_->unk_id() && processor_->IdToPiece(id) != token) return std::nullopt;
  return id;
}

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
