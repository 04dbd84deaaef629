#include "loom/data/tokenizer/hf_decoder.h"

#include "loom/data/tokenizer/byte_level.h"
#include "loom/data/tokenizer/unicode.h"

namespace loom::data {

namespace {

// HF's ByteLevel decoder: each token's characters back to bytes (a token with a character
// outside the alphabet, such as an added token, keeps its own UTF-8), all tokens joined, then
// decoded lossily.
std::string byte_level_decode(const std::vector<std::string>& tokens) {
  const ByteLevelAlphabet& alphabet = byte_level_alphabet();
  std::string bytes, token_bytes;
  for (const std::string& t : tokens) {
    token_bytes.clear();
    bool mapped = true;
    for (size_t i = 0; i < t.size() && mapped;) {
      const size_t n = utf8_length(static_cast<unsigned char>(t[i]));
      uint32_t cp = static_cast<unsigned char>(t[i]);
      if (n > 1) {
        cp &= 0x7Fu >> n;
        for (size_t k = 1; k < n && i + k < t.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(t[i + k]) & 0x3F);
      }
      const auto it = alphabet.char_to_byte.find(cp);
      if (it == alphabet.char_to_byte.end()) mapped = false; else token_bytes += static_cast<char>(it->second);
      i += n;
    }
    bytes += mapped ? token_bytes : t;
  }
  return utf8_lossy(bytes);
}

// HF's ByteFallback decoder: runs of <0xXX> tokens become their bytes; a run that is not valid
// UTF-8 becomes one U+FFFD per byte (HF's rule; a TextDecoder would give fewer).
std::vector<std::string> byte_fallback_decode(const std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string run;
  size_t run_tokens = 0;
  auto flush = [&] {
    if (run_tokens == 0) return;
    if (invalid_utf8_offset(run) == std::string::npos) {
      out.push_back(run);
    } else {
      for (size_t i = 0; i < run_tokens; ++i) out.emplace_back("\xEF\xBF\xBD");
    }
    run.clear();
    run_tokens = 0;
  };
  for (const std::string& t : tokens) {
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
        std::isxdigit(static_cast<unsigned char>(t[4]))) {
      run += static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16));
      ++run_tokens;
      continue;
    }
    flush();
    out.push_back(t);
  }
  flush();
  return out;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

// HF's Strip decoder: up to `start` leading and `stop` trailing copies of one character.
std::string strip(const std::string& t, const std::string& c, size_t start, size_t stop) {
  size_t b = 0, e = t.size();
  for (size_t i = 0; i < start && t.compare(b, c.size(), c) == 0 && b + c.size() <= e; ++i) b += c.size();
  for (size_t i = 0; i < stop && e >= b + c.size() && t.compare(e - c.size(), c.size(), c) == 0; ++i) e -= c.size();
  return t.substr(b, e - b);
}

}  // namespace

HfDecoder::HfDecoder(const nlohmann::json& config, const JsonPlace& at) {
  if (config.is_null()) return;
  none_ = false;
  add(config, at);
}

void HfDecoder::add(const nlohmann::json& config, const JsonPlace& at) {
  Step step;
  step.type = json_type(config, at);
  if (step.type == "Sequence") {
    const auto& list = json_field(config, "decoders", at);
    LOOM_CHECK(list.is_array(), DataError, at.child("decoders").str(), " must be a list");
    for (size_t i = 0; i < list.size(); ++i) add(list[i], at.child("decoders").item(i));
    return;
  }
  if (step.type == "Replace") {
    const auto& pattern = json_field(config, "pattern", at);
    LOOM_CHECK(pattern.is_object() && pattern.contains("String"), DataError, at.child("pattern").str(),
               " must be {\"String\": ...}; Loom's Replace decoder takes literal patterns");
    step.pattern = json_string(pattern, "String", at.child("pattern"));
    step.content = json_string(config, "content", at);
  } else if (step.type == "Strip") {
    step.content = json_string(config, "content", at);
    step.start = json_field(config, "start", at).get<size_t>();
    step.stop = json_field(config, "stop", at).get<size_t>();
  } else if (step.type != "ByteLevel" && step.type != "ByteFallback" && step.type != "Fuse") {
    unsupported_component(at, step.type, "the decoders ByteLevel, ByteFallback, Fuse, Replace, Strip and Sequence");
  }
  steps_.push_back(step);
}

std::string HfDecoder::decode(std::vector<std::string> tokens) const {
  if (none_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  for (const Step& step : steps_) {
    if (step.type == "ByteLevel") {
      tokens = {byte_level_decode(tokens)};
    } else if (step.type == "ByteFallback") {
      tokens = byte_fallback_decode(tokens);
    } else if (step.type == "Fuse") {
      std::string all;
      for (const auto& t : tokens) all += t;
      tokens = {all};
    } else if (step.type == "Replace") {
      for (auto& t : tokens) t = replace_all(t, step.pattern, step.content);
    } else if (step.type == "Strip") {
      for (auto& t : tokens) t = strip(t, step.content, step.start, step.stop);
    }
  }
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

HfPostProcessor::HfPostProcessor(const nlohmann::json& config, const JsonPlace& at) {
  if (!config.is_null()) add(config, at);
}

void HfPostProcessor::add(const nlohmann::json& config, const JsonPlace& at) {
  const std::string type = json_type(config, at);
  if (type == "Sequence") {
    const auto& list = json_field(config, "processors", at);
    LOOM_CHECK(list.is_array(), DataError, at.child("processors").str(), " must be a list");
    for (size_t i = 0; i < list.size(); ++i) add(list[i], at.child("processors").item(i));
    return;
  }
  if (type == "ByteLevel") return;  // it only trims offsets; ids are unchanged
  if (type != "TemplateProcessing") {
    unsupported_component(at, type, "the post-processors TemplateProcessing, ByteLevel and Sequence");
  }
  LOOM_CHECK(!has_template_, DataError, at.str(), ": a second TemplateProcessing; Loom applies one");
  has_template_ = true;
  const auto& single = json_field(config, "single", at);
  const auto& specials = json_field(config, "special_tokens", at);
  LOOM_CHECK(single.is_array(), DataError, at.child("single").str(), " must be a list");
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const JsonPlace item_at = at.child("single").item(i);
    const auto& item = single[i];
    if (item.contains("Sequence")) {
      LOOM_CHECK(json_string(item["Sequence"], "id", item_at.child("Sequence")) == "A" && !seen_sequence, DataError,
                 item_at.str(), ": the single-sequence template must hold sequence A once");
      seen_sequence = true;
      continue;
    }
    LOOM_CHECK(item.contains("SpecialToken"), DataError, item_at.str(),
               " must be {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    const std::string name = json_string(item["SpecialToken"], "id", item_at.child("SpecialToken"));
    LOOM_CHECK(specials.is_object() && specials.contains(name), DataError, at.child("special_tokens").str(),
               " has no entry \"", name, "\" that ", item_at.str(), " names");
    const auto& ids = json_field(specials[name], "ids", at.child("special_tokens").child(name));
    for (const auto& id : ids) (seen_sequence ? after_ : before_).push_back(id.get<int64_t>());
  }
  LOOM_CHECK(seen_sequence, DataError, at.child("single").str(), " never places the sequence (A)");
}

}  // namespace loom::data
