// tokenizer.json "decoder" (tokens back to text) and "post_processor" (special tokens around an
// encoded text), as HF tokenizers runs them. Decoders: ByteLevel, ByteFallback, Fuse, Replace,
// Strip and Sequence; post-processors: TemplateProcessing, ByteLevel and Sequence. Any other is a
// DataError naming it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/data/tokenizer/json_fields.h"

namespace loom::data {

class HfDecoder {
 public:
  HfDecoder() = default;
  // `config` is the "decoder" value (null: the tokens joined with spaces, as HF does).
  HfDecoder(const nlohmann::json& config, const JsonPlace& at);
  std::string decode(std::vector<std::string> tokens) const;

 private:
  struct Step {
    std::string type;
    std::string pattern, content;  // Replace; Strip's content
    size_t start = 0, stop = 0;    // Strip
  };
  void add(const nlohmann::json& config, const JsonPlace& at);
  std::vector<Step> steps_;
  bool none_ = true;
};

class HfPostProcessor {
 public:
  HfPostProcessor() = default;
  // `config` is the "post_processor" value (null: none).
  HfPostProcessor(const nlohmann::json& config, const JsonPlace& at);
  // The ids TemplateProcessing's "single" template puts before and after the text's.
  const std::vector<int64_t>& prefix() const { return before_; }
  const std::vector<int64_t>& suffix() const { return after_; }

 private:
  void add(const nlohmann::json& config, const JsonPlace& at);
  std::vector<int64_t> before_, after_;  // ids around the sequence
  bool has_template_ = false;
};

}  // namespace loom::data
