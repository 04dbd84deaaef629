#include "loom/data/tokenizer/bpe.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <queue>

#include "loom/data/tokenizer/byte_level.h"
#include "loom/data/tokenizer/unicode.h"

namespace loom::data {

namespace {

constexpr size_t kCacheWords = 1 << 17;
constexpr size_t kMaxCachedWordBytes = 256;  // HF caches words below this length too

struct CachedWord {
  std::vector<uint32_t> ids, lengths;
};

// The calling thread's cache of encoded words, for one model at a time: a thread that moves to
// another model starts afresh. Full, it stops taking words (as HF's cache does).
struct WordCache {
  uint64_t model = 0;
  std::unordered_map<std::string, CachedWord, StringHash, std::equal_to<>> words;
};

WordCache& thread_cache(uint64_t model) {
  thread_local WordCache cache;
  if (cache.model != model) {
    cache.words.clear();
    cache.model = model;
  }
  return cache;
}

std::atomic<uint64_t> next_instance{1};

uint64_t pair_key(uint32_t left, uint32_t right) { return (static_cast<uint64_t>(left) << 32) | right; }

std::optional<std::string> optional_string(const nlohmann::json& model, const std::string& key, const JsonPlace& at) {
  const auto it = model.find(key);
  if (it == model.end() || it->is_null()) return std::nullopt;
  LOOM_CHECK(it->is_string(), DataError, at.child(key).str(), " must be a string or null");
  return it->get<std::string>();
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& model, const JsonPlace& at, bool byte_level)
    : byte_level_(byte_level), instance_(next_instance++) {
  const auto& vocab = json_field(model, "vocab", at);
  LOOM_CHECK(vocab.is_object(), DataError, at.child("vocab").str(), " must be an object of token: id");
  vocab_.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    LOOM_CHECK(id.is_number_unsigned(), DataError, at.child("vocab").str(), ": the id of \"", token,
               "\" must be a non-negative integer, got ", id.dump());
    vocab_.emplace(token, id.get<uint32_t>());
  }
  const auto dropout = model.find("dropout");
  LOOM_CHECK(dropout == model.end() || dropout->is_null() || (dropout->is_number() && dropout->get<double>() == 0.0),
             DataError, at.child("dropout").str(), " is ", dropout->dump(),
             ": BPE dropout samples different tokens on every call; remove it for preprocessing");
  byte_fallback_ = json_bool(model, "byte_fallback", false, at);
  ignore_merges_ = json_bool(model, "ignore_merges", false, at);
  fuse_unk_ = json_bool(model, "fuse_unk", false, at);
  continuing_subword_prefix_ = optional_string(model, "continuing_subword_prefix", at).value_or("");
  end_of_word_suffix_ = optional_string(model, "end_of_word_suffix", at).value_or("");
  if (const auto unk = optional_string(model, "unk_token", at)) {
    const auto it = vocab_.find(*unk);
    LOOM_CHECK(it != vocab_.end(), DataError, at.child("unk_token").str(), " \"", *unk, "\" is not in the vocabulary");
    unk_id_ = it->second;
  }
  const ByteLevelAlphabet& alphabet = byte_level_alphabet();
  plain_bytes_ = byte_level_ && continuing_subword_prefix_.empty() && end_of_word_suffix_.empty();
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_.find(alphabet.byte_to_char[static_cast<size_t>(b)]);
    byte_ids_[static_cast<size_t>(b)] = it == vocab_.end() ? -1 : it->second;
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const auto fb = vocab_.find(std::string_view(name));
    fallback_ids_[static_cast<size_t>(b)] = fb == vocab_.end() ? -1 : fb->second;
    plain_bytes_ = plain_bytes_ && byte_ids_[static_cast<size_t>(b)] >= 0;
  }
  read_merges(json_field(model, "merges", at), at.child("merges"));
}

BpeModel::~BpeModel() = default;

void BpeModel::read_merges(const nlohmann::json& merges, const JsonPlace& at) {
  LOOM_CHECK(merges.is_array(), DataError, at.str(), " must be a list");
  merges_.reserve(merges.size());
  std::string left, right;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& m = merges[rank];
    if (m.is_string()) {  // "left right", the format before tokenizers 0.20
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      LOOM_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos, DataError, at.item(rank).str(),
                 " is \"", s, "\": a merge is two tokens separated by one space");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      LOOM_THROW(DataError, at.item(rank).str(), " must be \"left right\" or [\"left\", \"right\"], got ", m.dump());
    }
    // The merged token drops the right part's continuing-subword prefix (HF's BPE builder).
    std::string merged = left + right.substr(std::min(continuing_subword_prefix_.size(), right.size()));
    const auto l = vocab_.find(left), r = vocab_.find(right), n = vocab_.find(merged);
    for (const auto& [found, token] : {std::pair{l != vocab_.end(), &left}, std::pair{r != vocab_.end(), &right},
                                       std::pair{n != vocab_.end(), &merged}}) {
      LOOM_CHECK(found, DataError, at.item(rank).str(), ": \"", *token,
                 "\" is not in model.vocab; the merges do not belong to this vocabulary");
    }
    // A repeated pair keeps its last rank, as HF's HashMap collect does.
    merges_[pair_key(l->second, r->second)] = {static_cast<uint32_t>(rank), n->second};
  }
}

const BpeModel::Merge* BpeModel::find_merge(uint32_t left, uint32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

// HF's BPE::merge_word: one symbol per character (per byte for byte-level words), the subword
// prefix on all but the first and the suffix on the last; a character outside the vocabulary
// becomes its <0xXX> byte tokens (byte_fallback), else the unknown token (runs of them fused
// when fuse_unk), else nothing, as HF drops it.
void BpeModel::initial_symbols(std::string_view word, bool space_before, std::vector<Symbol>& symbols) const {
  symbols.clear();
  auto add = [&](uint32_t id, uint32_t length) {
    symbols.push_back({id, length, static_cast<int32_t>(symbols.size()) - 1, -1});
  };
  if (plain_bytes_) {  // every byte is a vocabulary symbol: one table lookup each
    if (space_before) add(static_cast<uint32_t>(byte_ids_[' ']), 0);
    for (const char c : word) add(static_cast<uint32_t>(byte_ids_[static_cast<unsigned char>(c)]), 1);
  } else {
    std::string spaced = space_before ? " " : "";
    spaced.append(word);
    bool unk_pending = false;
    uint32_t unk_length = 0;
    std::string piece;
    for (size_t i = 0; i < spaced.size();) {
      const auto lead = static_cast<unsigned char>(spaced[i]);
      const size_t n = byte_level_ ? 1 : std::min(utf8_length(lead), spaced.size() - i);
      const uint32_t length = space_before && i == 0 ? 0 : static_cast<uint32_t>(n);
      piece = i > 0 ? continuing_subword_prefix_ : "";
      piece += byte_level_ ? byte_level_alphabet().byte_to_char[lead] : spaced.substr(i, n);
      if (i + n == spaced.size()) piece += end_of_word_suffix_;
      i += n;
      if (const auto it = vocab_.find(piece); it != vocab_.end()) {
        if (unk_pending) add(*unk_id_, unk_length), unk_pending = false;
        add(it->second, length);
        continue;
      }
      // HF looks up <0xXX> for every byte of the piece, prefix and suffix included.
      const bool fallback = byte_fallback_ && std::all_of(piece.begin(), piece.end(), [&](char b) {
        return fallback_ids_[static_cast<unsigned char>(b)] >= 0;
      });
      if (fallback) {
        for (size_t k = 0; k < piece.size(); ++k) {
          add(static_cast<uint32_t>(fallback_ids_[static_cast<unsigned char>(piece[k])]), k == 0 ? length : 0);
        }
        continue;
      }
      if (!unk_id_) continue;
      if (unk_pending && fuse_unk_) {
        unk_length += length;
      } else {
        if (unk_pending) add(*unk_id_, unk_length);
        unk_pending = true;
        unk_length = length;
      }
    }
    if (unk_pending) add(*unk_id_, unk_length);
  }
  for (size_t i = 0; i + 1 < symbols.size(); ++i) symbols[i].next = static_cast<int32_t>(i + 1);
}

// HF's Word::merge_all: repeatedly merge the pair of lowest rank (leftmost first), skipping
// queue entries that an earlier merge made stale.
void BpeModel::merge_all(std::vector<Symbol>& symbols) const {
  struct Candidate {
    uint32_t rank;
    int32_t pos;
    uint32_t id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const Merge* m = find_merge(symbols[i].id, symbols[i + 1].id)) {
      queue.push({m->rank, static_cast<int32_t>(i), m->id});
    }
  }
  std::vector<bool> gone(symbols.size(), false);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.pos)];
    if (gone[static_cast<size_t>(top.pos)] || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    const Merge* m = find_merge(left.id, right.id);
    if (m == nullptr || m->id != top.id) continue;
    left.id = top.id;
    left.length += right.length;
    gone[static_cast<size_t>(left.next)] = true;
    left.next = right.next;
    if (left.next >= 0) symbols[static_cast<size_t>(left.next)].prev = top.pos;
    if (left.prev >= 0) {
      const Symbol& before = symbols[static_cast<size_t>(left.prev)];
      if (const Merge* p = find_merge(before.id, left.id)) queue.push({p->rank, left.prev, p->id});
    }
    if (left.next >= 0) {
      if (const Merge* n = find_merge(left.id, symbols[static_cast<size_t>(left.next)].id)) {
        queue.push({n->rank, top.pos, n->id});
      }
    }
  }
  size_t kept = 0;
  for (size_t i = 0; i < symbols.size(); ++i) {
    if (!gone[i]) symbols[kept++] = symbols[i];
  }
  symbols.resize(kept);
}

// The ids of a word not in the cache: the whole word when ignore_merges finds it in the
// vocabulary (HF looks it up before merging; Llama 3 sets it), else BPE's merges.
void BpeModel::encode_uncached(std::string_view word, bool space_before, std::vector<uint32_t>& ids,
                               std::vector<uint32_t>& lengths) const {
  if (ignore_merges_) {
    std::string whole = space_before ? " " : "";
    whole.append(word);
    if (byte_level_) {
      std::string mapped;
      for (const char c : whole) mapped += byte_level_alphabet().byte_to_char[static_cast<unsigned char>(c)];
      whole.swap(mapped);
    }
    if (const auto it = vocab_.find(whole); it != vocab_.end()) {
      ids.push_back(it->second);
      lengths.push_back(static_cast<uint32_t>(word.size()));
      return;
    }
  }
  thread_local std::vector<Symbol> symbols;
  initial_symbols(word, space_before, symbols);
  merge_all(symbols);
  for (const Symbol& s : symbols) {
    ids.push_back(s.id);
    lengths.push_back(s.length);
  }
}

void BpeModel::encode_word(std::string_view word, bool space_before, std::vector<uint32_t>& ids,
                           std::vector<uint32_t>& lengths) const {
  thread_local std::string key;
  key.assign(space_before ? "\x01" : "\x00", 1);  // the inserted space is part of the word
  key.append(word);
  WordCache& cache = thread_cache(instance_);
  if (const auto it = cache.words.find(std::string_view(key)); it != cache.words.end()) {
    ids.insert(ids.end(), it->second.ids.begin(), it->second.ids.end());
    lengths.insert(lengths.end(), it->second.lengths.begin(), it->second.lengths.end());
    return;
  }
  const size_t first = ids.size();
  encode_uncached(word, space_before, ids, lengths);
  if (word.size() < kMaxCachedWordBytes && cache.words.size() < kCacheWords) {
    cache.words.emplace(key, CachedWord{{ids.begin() + static_cast<std::ptrdiff_t>(first), ids.end()},
                                        {lengths.begin() + static_cast<std::ptrdiff_t>(first), lengths.end()}});
  }
}

}  // namespace loom::data
