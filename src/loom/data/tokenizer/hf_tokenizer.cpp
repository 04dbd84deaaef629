#include "loom/data/tokenizer/hf_tokenizer.h"

#include <fstream>
#include <sstream>

#include "loom/data/tokenizer/unicode.h"

namespace loom::data {

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in.good(), IOError, "cannot read ", path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    LOOM_THROW(DataError, path, ": not valid JSON (the parser stopped at byte ", e.byte, " of ", text.str().size(),
               "; a file cut short by a failed download ends early): fetch tokenizer.json again");
  }
}

}  // namespace

HfTokenizer::HfTokenizer(const std::string& json_path, const TokenizerConfig& config) {
  path_ = json_path;
  const nlohmann::json root = read_json(json_path);
  try {
    load(root);
  } catch (const nlohmann::json::exception& e) {
    // A field of the wrong JSON type deep in a component; the checks in load() name the common
    // ones. nlohmann's text after its "[json.exception...] " tag says which type it found.
    const std::string what = e.what();
    const size_t tag_end = what.find("] ");
    LOOM_THROW(DataError, json_path, ": a field does not have the type tokenizer.json gives it (",
               tag_end == std::string::npos ? what : what.substr(tag_end + 2),
               "); the file is not a tokenizer.json that the tokenizers library wrote");
  }
  configure(config);
}

HfTokenizer::~HfTokenizer() = default;

void HfTokenizer::load(const nlohmann::json& root) {
  const JsonPlace top{path_, ""};
  LOOM_CHECK(root.is_object() && root.contains("model") && root["model"].is_object(), DataError, path_,
             " is not a Hugging Face tokenizer.json (it has no \"model\" object); pass the tokenizer.json of the "
             "model, its folder, or a SentencePiece .model");
  for (const char* unsupported : {"truncation", "padding"}) {
    const auto it = root.find(unsupported);
    LOOM_CHECK(it == root.end() || it->is_null(), DataError, path_, ": \"", unsupported,
               "\" is set; HF would cut or pad every encoding to it, Loom encodes whole texts: set it to null");
  }
  const JsonPlace model_at = top.child("model");
  const nlohmann::json& model = root["model"];
  const std::string type = model.contains("type") ? json_type(model, model_at) : "BPE";
  if (type != "BPE") unsupported_component(model_at, type, "the BPE model");
  normalizer_ = HfNormalizer(root.value("normalizer", nlohmann::json()), top.child("normalizer"));
  pre_tokenizer_ = HfPreTokenizer(root.value("pre_tokenizer", nlohmann::json()), top.child("pre_tokenizer"));
  model_ = std::make_unique<BpeModel>(model, model_at, pre_tokenizer_.byte_level());
  post_processor_ = HfPostProcessor(root.value("post_processor", nlohmann::json()), top.child("post_processor"));
  decoder_ = HfDecoder(root.value("decoder", nlohmann::json()), top.child("decoder"));

  for (const auto& [token, id] : model_->vocab()) {
    if (id >= id_to_token_.size()) id_to_token_.resize(id + 1);
    id_to_token_[id] = token;
  }
  read_added_tokens(root.value("added_tokens", nlohmann::json::array()), top.child("added_tokens"));
  special_.assign(id_to_token_.size(), false);
  for (const AddedToken& t : added_tokens_) special_[t.id] = t.special;
}

void HfTokenizer::read_added_tokens(const nlohmann::json& list, const JsonPlace& at) {
  LOOM_CHECK(list.is_array(), DataError, at.str(), " must be a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonPlace item = at.item(i);
    AddedToken t;
    t.content = json_string(list[i], "content", item);
    t.id = json_field(list[i], "id", item).get<uint32_t>();
    t.special = json_bool(list[i], "special", false, item);
    t.normalized = json_bool(list[i], "normalized", !t.special, item);
    for (const char* option : {"single_word", "lstrip", "rstrip"}) {
      LOOM_CHECK(!json_bool(list[i], option, false, item), DataError, item.str(), " (\"", t.content, "\") sets ",
                 option, ", which Loom does not implement; its matches would differ from Hugging Face's");
    }
    LOOM_CHECK(invalid_utf8_offset(t.content) == std::string::npos, DataError, item.str(), " is not valid UTF-8");
    if (t.id >= id_to_token_.size()) id_to_token_.resize(t.id + 1);
    id_to_token_[t.id] = t.content;
    added_ids_[t.content] = t.id;
    // Normalized tokens are looked for in normalized text, so in their normalized spelling.
    if (t.normalized && !normalizer_.empty()) {
      normalized_added_.add(normalizer_.apply(t.content).text, t.id);
    } else {
      (t.normalized ? normalized_added_ : raw_added_).add(t.content, t.id);
    }
    added_tokens_.push_back(std::move(t));
  }
}

Encoding HfTokenizer::encode_with_spans(std::string_view text, bool add_special_tokens) const {
  const size_t bad = invalid_utf8_offset(text);
  LOOM_CHECK(bad == std::string_view::npos, DataError, "text is not valid UTF-8 (byte ", bad, " of ", text.size(),
             "); tokenizer ", path_, " encodes Unicode text only: fix or drop the input");
  Encoding out;
  if (add_special_tokens) {
    for (const int64_t id : post_processor_.prefix()) out.ids.push_back(id), out.spans.push_back({0, 0});
  }
  thread_local std::vector<AddedMatch> matches;
  raw_added_.find_all(text, matches);
  size_t at = 0;
  for (const AddedMatch& m : matches) {
    encode_segment(text, at, m.begin, out);
    out.ids.push_back(m.id);
    out.spans.push_back({m.begin, m.end});
    at = m.end;
  }
  encode_segment(text, at, text.size(), out);
  if (add_special_tokens) {
    for (const int64_t id : post_processor_.suffix()) out.ids.push_back(id), out.spans.push_back({text.size(), text.size()});
  }
  return out;
}

void HfTokenizer::encode_segment(std::string_view text, size_t begin, size_t end, Encoding& out) const {
  if (begin == end) return;
  NormalizedText normalized;
  if (normalizer_.empty()) {
    normalized.text.assign(text.substr(begin, end - begin));
  } else {
    normalized = normalizer_.apply(text.substr(begin, end - begin));
  }
  thread_local std::vector<AddedMatch> matches;
  normalized_added_.find_all(normalized.text, matches);
  size_t at = 0;
  auto origin = [&](size_t pos) {
    if (normalized.identity()) return begin + pos;
    return begin + (pos < normalized.text.size() ? normalized.from_begin[pos] : end - begin);
  };
  for (const AddedMatch& m : matches) {
    encode_words(normalized, at, m.begin, begin, out);
    out.ids.push_back(m.id);
    out.spans.push_back({origin(m.begin), normalized.identity() ? begin + m.end : begin + normalized.from_end[m.end - 1]});
    at = m.end;
  }
  encode_words(normalized, at, normalized.text.size(), begin, out);
}

// Pre-tokenizes normalized.text[begin, end), encodes each word, and maps each token's bytes back
// to the caller's text (`origin` is where the normalized segment starts there).
void HfTokenizer::encode_words(const NormalizedText& normalized, size_t begin, size_t end, size_t origin,
                               Encoding& out) const {
  if (begin == end) return;
  thread_local std::vector<PreToken> words;
  thread_local std::vector<uint32_t> ids, lengths;
  words.clear();
  pre_tokenizer_.split(normalized.text, begin, end, words);
  const std::string_view text = normalized.text;
  for (const PreToken& w : words) {
    ids.clear();
    lengths.clear();
    model_->encode_word(text.substr(w.begin, w.end - w.begin), w.space_before, ids, lengths);
    size_t pos = w.begin;
    for (size_t k = 0; k < ids.size(); ++k) {
      const size_t b = pos, e = pos + lengths[k];
      pos = e;
      out.ids.push_back(ids[k]);
      if (normalized.identity()) {
        out.spans.push_back({origin + b, origin + e});
      } else {
        const size_t ob = b < text.size() ? normalized.from_begin[b] : normalized.from_end.back();
        out.spans.push_back({origin + ob, origin + (e > b ? normalized.from_end[e - 1] : ob)});
      }
    }
  }
}

std::string HfTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int64_t id : ids) {
    LOOM_CHECK(id >= 0 && id < vocab_size() && !id_to_token_[static_cast<size_t>(id)].empty(), DataError, "id ", id,
               " is not a token of ", path_, " (vocabulary of ", vocab_size(), "); were the ids made by another tokenizer?");
    if (skip_special_tokens && special_[static_cast<size_t>(id)]) continue;
    tokens.push_back(id_to_token_[static_cast<size_t>(id)]);
  }
  return decoder_.decode(std::move(tokens));
}

std::string HfTokenizer::id_to_token(int64_t id) const {
  LOOM_CHECK(id >= 0 && id < vocab_size(), DataError, "id ", id, " is outside the vocabulary of ", path_);
  return id_to_token_[static_cast<size_t>(id)];
}

std::optional<int64_t> HfTokenizer::token_to_id(std::string_view token) const {
  if (const auto it = added_ids_.find(token); it != added_ids_.end()) return it->second;
  if (const auto it = model_->vocab().find(token); it != model_->vocab().end()) return it->second;
  return std::nullopt;
}

}  // namespace loom::data
