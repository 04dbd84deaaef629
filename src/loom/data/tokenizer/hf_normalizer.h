// tokenizer.json "normalizer": Unicode normal forms (NFC, NFD, NFKC, NFKD) and Sequence of them.
// Any other normalizer is a DataError naming it.
#pragma once

#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/data/tokenizer/json_fields.h"
#include "loom/data/tokenizer/unicode.h"

namespace loom::data {

class HfNormalizer {
 public:
  HfNormalizer() = default;
  // `config` is the "normalizer" value (null: none).
  HfNormalizer(const nlohmann::json& config, const JsonPlace& at);
  bool empty() const { return forms_.empty(); }
  NormalizedText apply(std::string_view text) const;

 private:
  void add(const nlohmann::json& config, const JsonPlace& at);
  std::vector<NormalForm> forms_;  // applied in order
};

}  // namespace loom::data
