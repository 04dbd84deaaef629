// tokenizer.json "model" of type BPE: vocabulary, ranked merges, byte fallback, unknown token,
// subword prefix/suffix and ignore_merges, applied to one word at a time as HF tokenizers'
// BPE::merge_word and Word::merge_all do. Words are cached per thread (most text repeats its
// words; a per-thread cache needs no lock, so workers encoding in parallel do not contend).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/data/tokenizer/json_fields.h"

namespace loom::data {

// Heterogeneous lookup: find a std::string key with a string_view, no copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `byte_level`: words arrive as raw bytes and each byte is one symbol of the ByteLevel alphabet.
  BpeModel(const nlohmann::json& model, const JsonPlace& at, bool byte_level);
  ~BpeModel();

  // Appends the ids of `word` (preceded by a space when space_before) and how many of the word's
  // bytes each covers. Thread-safe.
  void encode_word(std::string_view word, bool space_before, std::vector<uint32_t>& ids,
                   std::vector<uint32_t>& lengths) const;

  const StringIdMap& vocab() const { return vocab_; }

 private:
  struct Symbol {
    uint32_t id;
    uint32_t length;  // bytes of the word
    int32_t prev, next;
  };
  struct Merge {
    uint32_t rank;
    uint32_t id;
  };

  void read_merges(const nlohmann::json& merges, const JsonPlace& at);
  void initial_symbols(std::string_view word, bool space_before, std::vector<Symbol>& symbols) const;
  void merge_all(std::vector<Symbol>& symbols) const;
  void encode_uncached(std::string_view word, bool space_before, std::vector<uint32_t>& ids,
                       std::vector<uint32_t>& lengths) const;
  const Merge* find_merge(uint32_t left, uint32_t right) const;

  StringIdMap vocab_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left << 32 | right) -> rank, merged id
  bool byte_level_ = false;
  std::array<int64_t, 256> byte_ids_{};       // byte-level alphabet ids (-1: not in the vocabulary)
  std::array<int64_t, 256> fallback_ids_{};   // <0xXX> ids for byte_fallback (-1: absent)
  bool plain_bytes_ = false;  // byte-level, every byte in the vocabulary, no prefix or suffix
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  std::optional<uint32_t> unk_id_;
  std::string continuing_subword_prefix_, end_of_word_suffix_;
  uint64_t instance_ = 0;  // tells this model's cached words from another's
};

}  // namespace loom::data
