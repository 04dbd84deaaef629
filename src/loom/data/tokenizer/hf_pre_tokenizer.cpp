#include "loom/data/tokenizer/hf_pre_tokenizer.h"

namespace loom::data {

namespace {

// HF tokenizers' SplitDelimiterBehavior: what happens to each matched delimiter.
enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

Behavior behavior_of(const std::string& name, const JsonPlace& at) {
  if (name == "Removed") return Behavior::removed;
  if (name == "Isolated") return Behavior::isolated;
  if (name == "MergedWithPrevious") return Behavior::merged_with_previous;
  if (name == "MergedWithNext") return Behavior::merged_with_next;
  if (name == "Contiguous") return Behavior::contiguous;
  LOOM_THROW(DataError, at.str(), " is \"", name,
             "\"; expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
}

// GPT-2's pattern, which ByteLevel uses when use_regex is set (HF tokenizers' byte_level.rs).
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct Piece {
  size_t begin, end;
  bool delimiter;
};

// HF tokenizers' NormalizedString::split: the text as alternating pieces, then merged or
// dropped per `behavior`; empty pieces never become words.
void split_pieces(const std::vector<Piece>& pieces, Behavior behavior, std::vector<PreToken>& out) {
  const size_t first = out.size();
  bool previous_delimiter = false;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    if (p.begin == p.end) continue;
    const bool can_merge_back = out.size() > first && out.back().end == p.begin;
    switch (behavior) {
      case Behavior::removed:
        if (!p.delimiter) out.push_back({p.begin, p.end, false});
        break;
      case Behavior::isolated:
        out.push_back({p.begin, p.end, false});
        break;
      case Behavior::merged_with_previous:
        if (p.delimiter && can_merge_back && !previous_delimiter) {
          out.back().end = p.end;
        } else {
          out.push_back({p.begin, p.end, false});
        }
        break;
      case Behavior::merged_with_next:
        if (!p.delimiter && can_merge_back && previous_delimiter) {
          out.back().end = p.end;
        } else {
          out.push_back({p.begin, p.end, false});
        }
        break;
      case Behavior::contiguous:
        if (p.delimiter && can_merge_back && previous_delimiter) {
          out.back().end = p.end;
        } else {
          out.push_back({p.begin, p.end, false});
        }
        break;
    }
    previous_delimiter = p.delimiter;
  }
}

}  // namespace

struct HfPreTokenizer::Step {
  enum class Kind { split, byte_level } kind = Kind::split;
  std::unique_ptr<Regex> regex;  // Split's regex, or ByteLevel's when use_regex
  std::string literal;           // Split's string pattern
  Behavior behavior = Behavior::isolated;
  bool invert = false;
  bool add_prefix_space = false;

  // The delimiters of text[begin, end) and the text between them, in order.
  void pieces(std::string_view text, size_t begin, size_t end, std::vector<Piece>& out) const {
    out.clear();
    thread_local std::vector<Match> matches;
    matches.clear();
    const std::string_view part = text.substr(begin, end - begin);
    if (regex) {
      regex->find_all(part, matches);
    } else {
      for (size_t at = part.find(literal); !literal.empty() && at != std::string_view::npos;
           at = part.find(literal, at + literal.size())) {
        matches.push_back({at, at + literal.size()});
      }
    }
    size_t previous = 0;
    for (const Match& m : matches) {
      if (m.begin != previous) out.push_back({begin + previous, begin + m.begin, invert});
      out.push_back({begin + m.begin, begin + m.end, !invert});
      previous = m.end;
    }
    if (previous != part.size()) out.push_back({begin + previous, end, invert});
  }
};

HfPreTokenizer::HfPreTokenizer(const nlohmann::json& config, const JsonPlace& at) {
  if (!config.is_null()) add(config, at);
}

HfPreTokenizer::HfPreTokenizer() = default;
HfPreTokenizer::~HfPreTokenizer() = default;
HfPreTokenizer::HfPreTokenizer(HfPreTokenizer&&) noexcept = default;
HfPreTokenizer& HfPreTokenizer::operator=(HfPreTokenizer&&) noexcept = default;

void HfPreTokenizer::add(const nlohmann::json& config, const JsonPlace& at) {
  const std::string type = json_type(config, at);
  LOOM_CHECK(!byte_level_, DataError, at.str(), ": a \"", type,
             "\" after ByteLevel; Loom runs ByteLevel as the last pre-tokenizer, as the models it supports do");
  auto step = std::make_unique<Step>();
  if (type == "Sequence") {
    const auto& list = json_field(config, "pretokenizers", at);
    LOOM_CHECK(list.is_array(), DataError, at.child("pretokenizers").str(), " must be a list");
    for (size_t i = 0; i < list.size(); ++i) add(list[i], at.child("pretokenizers").item(i));
    return;
  }
  if (type == "Split") {
    const auto& pattern = json_field(config, "pattern", at);
    const JsonPlace pattern_at = at.child("pattern");
    if (pattern.is_object() && pattern.contains("Regex")) {
      step->regex = std::make_unique<Regex>(json_string(pattern, "Regex", pattern_at), pattern_at.child("Regex").str());
    } else if (pattern.is_object() && pattern.contains("String")) {
      step->literal = json_string(pattern, "String", pattern_at);
    } else {
      LOOM_THROW(DataError, pattern_at.str(), " must be {\"Regex\": ...} or {\"String\": ...}, got ", pattern.dump());
    }
    step->behavior = behavior_of(json_string(config, "behavior", at), at.child("behavior"));
    step->invert = json_bool(config, "invert", false, at);
  } else if (type == "Digits") {
    // HF splits on char::is_numeric (Unicode N): each digit alone, or runs of them.
    const bool individual = json_bool(config, "individual_digits", false, at);
    step->regex = std::make_unique<Regex>(individual ? "\\p{N}" : "\\p{N}+", at.str());
  } else if (type == "ByteLevel") {
    step->kind = Step::Kind::byte_level;
    step->add_prefix_space = json_bool(config, "add_prefix_space", true, at);
    if (json_bool(config, "use_regex", true, at)) step->regex = std::make_unique<Regex>(kGpt2Pattern, at.str());
    byte_level_ = true;
  } else {
    unsupported_component(at, type, "the pre-tokenizers Split, Digits, ByteLevel and Sequence");
  }
  steps_.push_back(std::move(step));
}

void HfPreTokenizer::split(std::string_view text, size_t begin, size_t end, std::vector<PreToken>& words) const {
  const size_t first = words.size();
  words.push_back({begin, end, false});
  thread_local std::vector<PreToken> current;
  thread_local std::vector<Piece> pieces;
  thread_local std::string spaced;
  for (const auto& step : steps_) {
    current.assign(words.begin() + static_cast<std::ptrdiff_t>(first), words.end());
    words.resize(first);
    for (const PreToken& word : current) {
      if (step->kind == Step::Kind::split) {
        step->pieces(text, word.begin, word.end, pieces);
        split_pieces(pieces, step->behavior, words);
        continue;
      }
      // ByteLevel: a space goes in front of every word that lacks one, then (use_regex) GPT-2's
      // pattern splits the spaced word; offset 0 of `spaced` is the inserted space.
      const bool prefix = step->add_prefix_space && text[word.begin] != ' ';
      if (!step->regex) {
        words.push_back({word.begin, word.end, prefix});
        continue;
      }
      spaced.assign(prefix ? " " : "");
      spaced.append(text.substr(word.begin, word.end - word.begin));
      step->pieces(spaced, 0, spaced.size(), pieces);
      const size_t mark = words.size();
      split_pieces(pieces, Behavior::isolated, words);
      const size_t shift = prefix ? 1 : 0;
      for (size_t i = mark; i < words.size(); ++i) {
        PreToken& w = words[i];
        w.space_before = prefix && w.begin == 0;
        w.begin = word.begin + (w.begin == 0 ? 0 : w.begin - shift);
        w.end = word.begin + w.end - shift;
      }
    }
  }
}

}  // namespace loom::data
