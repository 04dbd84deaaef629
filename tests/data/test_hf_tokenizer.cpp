// Hugging Face tokenizer.json: ids, decodings and spans equal to the reference implementation's
// on the case texts (tests/data/tokenizer_cases.json) for Qwen3, Llama 3.1, DeepSeek-V3 and a
// byte-fallback fixture; round trips; and the errors for files Loom cannot apply exactly.
#include <gtest/gtest.h>

#include <fstream>

#include "loom/core/error.h"
#include "loom/data/tokenizer/byte_level.h"
#include "loom/data/tokenizer/hf_pre_tokenizer.h"
#include "loom/data/tokenizer/regex.h"
#include "loom/data/tokenizer/tokenizer.h"
#include "loom/data/tokenizer/unicode.h"
#include "testing/error_message.h"
#include "testing/temp_dir.h"
#include "tokenizer_test_util.h"

using namespace loom::data;
using namespace loom::data::testing_util;
using loom::testing::message_of;
using loom::testing::TempDir;
using loom::testing::read_file;
using loom::testing::write_file;

namespace {

std::vector<int64_t> ids_of(const nlohmann::ordered_json& list) { return list.get<std::vector<int64_t>>(); }

// The bytes of the text a token stands for: a byte-level token's characters mapped back to
// bytes, an added token's content as it is.
std::string token_bytes(const Tokenizer& t, int64_t id) {
  const std::string token = t.id_to_token(id);
  const auto& alphabet = byte_level_alphabet();
  std::string bytes;
  for (size_t i = 0; i < token.size();) {
    const size_t n = utf8_length(static_cast<unsigned char>(token[i]));
    uint32_t cp = static_cast<unsigned char>(token[i]);
    if (n > 1) {
      cp &= 0x7Fu >> n;
      for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(token[i + k]) & 0x3F);
    }
    const auto it = alphabet.char_to_byte.find(cp);
    if (it == alphabet.char_to_byte.end()) return token;
    bytes += static_cast<char>(it->second);
    i += n;
  }
  return bytes;
}

void check_texts(const std::string& model, const nlohmann::ordered_json& reference, bool byte_level) {
  const auto tokenizer = load_tokenizer(tokenizer_folder(model));
  const Tokenizer& t = *tokenizer;
  for (const auto& c : reference["texts"]) {
    const std::string text = c["text"];
    SCOPED_TRACE(model + " text: " + nlohmann::json(text).dump());
    EXPECT_EQ(t.encode(text), ids_of(c["ids"]));
    const Encoding plain = t.encode_with_spans(text, false);
    EXPECT_EQ(plain.ids, ids_of(c["ids_without_special"]));
    EXPECT_EQ(t.decode(ids_of(c["ids"])), c["decoded"].get<std::string>());
    EXPECT_EQ(t.decode(ids_of(c["ids"]), true), c["decoded_skip_special"].get<std::string>());
    // Round trip: the text comes back, in its normal form where the tokenizer normalizes (the
    // fixture's pre-tokenizer removes whitespace, so it has none).
    const std::string nfc = unicode_normalize(text, NormalForm::nfc).text;
    if (byte_level) {
      EXPECT_EQ(t.decode(plain.ids), model == "qwen3" ? nfc : text);
    }
    // Spans: in order, inside the text, and for byte-level tokens of unnormalized text exactly
    // the bytes each token encodes.
    ASSERT_EQ(plain.spans.size(), plain.ids.size());
    size_t previous_begin = 0;
    for (size_t i = 0; i < plain.ids.size(); ++i) {
      const TokenSpan s = plain.spans[i];
      EXPECT_LE(s.begin, s.end);
      EXPECT_LE(s.end, text.size());
      EXPECT_GE(s.begin, previous_begin);
      previous_begin = s.begin;
      if (byte_level && nfc == text) {
        EXPECT_EQ(text.substr(s.begin, s.end - s.begin), token_bytes(t, plain.ids[i])) << "token " << i;
      }
    }
  }
  EXPECT_EQ(t.bos_id(), reference["bos_token_id"].is_null() ? -1 : reference["bos_token_id"].get<int64_t>());
  EXPECT_EQ(t.eos_id(), reference["eos_token_id"].get<int64_t>());
}

}  // namespace

TEST(HfTokenizerReference, Qwen3TextsMatchTheReference) {
  LOOM_REFERENCE_OR_SKIP(reference, "qwen3");
  check_texts("qwen3", reference, true);
  EXPECT_EQ(load_tokenizer(tokenizer_folder("qwen3"))->pad_id(), 151643);  // <|endoftext|>
}

TEST(HfTokenizerReference, Llama31TextsMatchTheReference) {
  LOOM_REFERENCE_OR_SKIP(reference, "llama3_1");
  check_texts("llama3_1", reference, true);
  EXPECT_EQ(load_tokenizer(tokenizer_folder("llama3_1"))->pad_id(), -1);  // tokenizer_config.json names none
}

TEST(HfTokenizerReference, DeepSeekV3TextsMatchTheReference) {
  LOOM_REFERENCE_OR_SKIP(reference, "deepseek_v3");
  check_texts("deepseek_v3", reference, true);
}

TEST(HfTokenizerReference, ByteFallbackFixtureMatchesTheReference) {
  LOOM_REFERENCE_OR_SKIP(reference, "byte_fallback");
  check_texts("byte_fallback", reference, false);
}

// Cut-short token sequences decode as HF does: ill-formed UTF-8 becomes U+FFFD per maximal
// subpart. Every prefix of the emoji text's ids against the JavaScript reference's TextDecoder,
// which follows the same rule.
TEST(HfTokenizer, LossyUtf8FollowsMaximalSubparts) {
  EXPECT_EQ(utf8_lossy("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");                    // one truncated character
  EXPECT_EQ(utf8_lossy("\xE0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");            // E0 cannot take 80
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(invalid_utf8_offset("abc\xC3\xA9\xC3"), 5u);
  EXPECT_EQ(invalid_utf8_offset("plain ascii text, long enough for the fast path"), std::string::npos);
}

// Oniguruma's \s includes U+0085 and its \h is a hex digit; PCRE2 needs them spelled out.
TEST(HfTokenizer, RegexTranslationKeepsOnigurumaMeaning) {
  const Regex space("\\s+", "test");
  std::vector<Match> m;
  space.find_all("a\xC2\x85" "b", m);  // U+0085
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].begin, 1u);
  EXPECT_EQ(m[0].end, 3u);
  const Regex hex("\\h+", "test");
  hex.find_all("zz09afAFzz", m);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].end - m[0].begin, 6u);
  const Regex contraction("(?i:'s|'t)", "test");
  contraction.find_all("IT'S it's", m);
  EXPECT_EQ(m.size(), 2u);
  EXPECT_NE(message_of([] { Regex("\\bword", "tokenizer.json: pre_tokenizer.pattern.Regex"); }).find("uses \\b"),
            std::string::npos);
  EXPECT_NE(message_of([] { Regex("(unclosed", "tokenizer.json: pre_tokenizer.pattern.Regex"); })
                .find("tokenizer.json: pre_tokenizer.pattern.Regex: cannot compile the regex (unclosed"),
            std::string::npos);
}

// The fixture's normalizer is NFKC: the ligature "ﬁ" becomes "fi", one token whose span is the
// ligature's three bytes in the caller's text.
TEST(HfTokenizer, SpansPointIntoTheTextBeforeNormalization) {
  const auto t = load_tokenizer(fixture_tokenizer("byte_fallback"));
  const std::string text = "x \xEF\xAC\x81 y";  // "x ﬁ y"
  const Encoding e = t->encode_with_spans(text, false);
  ASSERT_EQ(e.ids.size(), 3u);
  EXPECT_EQ(t->id_to_token(e.ids[1]), "fi");
  EXPECT_EQ(e.spans[1].begin, 2u);
  EXPECT_EQ(e.spans[1].end, 5u);
  // Byte fallback: é is not in the vocabulary, so it is its two <0xXX> tokens.
  EXPECT_EQ(t->encode("\xC3\xA9", false), (std::vector<int64_t>{0xC3, 0xA9}));
  EXPECT_EQ(t->decode({0xC3, 0xA9}), "\xC3\xA9");
  // Special tokens in the text are matched before anything else, and the template adds <s> </s>.
  const auto with_special = t->encode("the<s>");
  ASSERT_EQ(with_special.size(), 4u);
  EXPECT_EQ(with_special.front(), t->bos_id());
  EXPECT_EQ(with_special[2], t->bos_id());
  EXPECT_EQ(with_special.back(), t->eos_id());
}

TEST(HfTokenizer, InvalidUtf8AndUnknownIdsAreErrors) {
  const auto t = load_tokenizer(fixture_tokenizer("byte_fallback"));
  EXPECT_NE(message_of([&] { t->encode("ok\xFF"); }).find("text is not valid UTF-8 (byte 2 of 3)"), std::string::npos);
  EXPECT_NE(message_of([&] { t->decode({1, 100000}); }).find("id 100000 is not a token of"), std::string::npos);
}

namespace {

// A copy of the fixture tokenizer with `edit` applied to its JSON, in `dir`.
std::string edited_fixture(const TempDir& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(read_file(fixture_tokenizer("byte_fallback") + "/tokenizer.json"));
  edit(j);
  const std::string path = dir.file("edited/tokenizer.json");
  write_file(path, j.dump());
  return path;
}

}  // namespace

TEST(HfTokenizer, BadFilesAreClearErrors) {
  TempDir dir;
  const std::string good = read_file(fixture_tokenizer("byte_fallback") + "/tokenizer.json");
  write_file(dir.file("cut/tokenizer.json"), good.substr(0, good.size() / 2));
  const std::string cut = message_of([&] { load_tokenizer(dir.file("cut")); });
  EXPECT_NE(cut.find(dir.file("cut/tokenizer.json") + ": not valid JSON"), std::string::npos) << cut;
  EXPECT_NE(cut.find("fetch tokenizer.json again"), std::string::npos) << cut;

  write_file(dir.file("config.json"), R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096})");
  EXPECT_NE(message_of([&] { load_tokenizer(dir.file("config.json")); }).find("is not a Hugging Face tokenizer.json"),
            std::string::npos);
  write_file(dir.file("notes.txt"), "some text, not a model");
  EXPECT_NE(message_of([&] { load_tokenizer(dir.file("notes.txt")); })
                .find("is neither a Hugging Face tokenizer.json nor a SentencePiece model"),
            std::string::npos);
  EXPECT_NE(message_of([&] { load_tokenizer(dir.file("empty-folder-that-is-missing")); }).find("does not exist"),
            std::string::npos);

  const auto expect_error = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& what) {
    const std::string path = edited_fixture(dir, edit);
    const std::string message = message_of([&] { load_tokenizer(path); });
    EXPECT_NE(message.find(what), std::string::npos) << message;
    EXPECT_NE(message.find(path), std::string::npos) << message;
  };
  expect_error([](auto& j) { j["model"]["type"] = "WordPiece"; }, "model is a \"WordPiece\", which Loom does not implement");
  expect_error([](auto& j) { j["normalizer"]["normalizers"].push_back({{"type", "Lowercase"}}); },
               "normalizer.normalizers[1] is a \"Lowercase\"");
  expect_error([](auto& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}}; },
               "pre_tokenizer is a \"Metaspace\"");
  expect_error([](auto& j) { j["decoder"]["decoders"][0] = {{"type", "CTC"}}; }, "decoder.decoders[0] is a \"CTC\"");
  expect_error([](auto& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; }, "post_processor is a \"RobertaProcessing\"");
  expect_error([](auto& j) { j["added_tokens"][0]["lstrip"] = true; }, "added_tokens[0] (\"<s>\") sets lstrip");
  expect_error([](auto& j) { j["truncation"] = {{"max_length", 512}}; }, "\"truncation\" is set");
  expect_error([](auto& j) { j["model"]["merges"].push_back("q zz"); }, "\"zz\" is not in model.vocab");
  expect_error([](auto& j) { j["model"]["vocab"] = 3; }, "model.vocab must be an object");
  expect_error([](auto& j) { j["pre_tokenizer"]["pretokenizers"][1]["individual_digits"] = "yes"; },
               "individual_digits must be true or false");
}

// A tokenizer.json alone (no tokenizer_config.json beside it) has no named special tokens; a
// folder's tokenizer_config.json names them, and must match the tokenizer.
TEST(HfTokenizer, SpecialTokensComeFromTokenizerConfig) {
  TempDir dir;
  write_file(dir.file("alone/tokenizer.json"), read_file(fixture_tokenizer("byte_fallback") + "/tokenizer.json"));
  const auto alone = load_tokenizer(dir.file("alone/tokenizer.json"));
  EXPECT_EQ(alone->eos_id(), -1);
  EXPECT_FALSE(alone->has_chat_template());
  const auto folder = load_tokenizer(fixture_tokenizer("byte_fallback"));
  EXPECT_EQ(folder->bos_id(), *folder->token_to_id("<s>"));
  EXPECT_EQ(folder->eos_id(), *folder->token_to_id("</s>"));
  EXPECT_TRUE(folder->has_chat_template());
  write_file(dir.file("alone/tokenizer_config.json"), R"({"eos_token": "<|eot_id|>"})");
  EXPECT_NE(message_of([&] { load_tokenizer(dir.file("alone")); })
                .find("tokenizer_config.json: eos_token \"<|eot_id|>\" is not a token of"),
            std::string::npos);
  write_file(dir.file("alone/tokenizer_config.json"), R"({"eos_token": )");
  EXPECT_NE(message_of([&] { load_tokenizer(dir.file("alone")); }).find("tokenizer_config.json: not valid JSON"),
            std::string::npos);
}

// HF's SplitDelimiterBehavior on "a-b--c": what happens to each delimiter.
TEST(HfTokenizer, SplitBehaviours) {
  const auto words = [](const std::string& behavior, bool invert = false) {
    const nlohmann::json config = {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
    const HfPreTokenizer pre(config, {"test", "pre_tokenizer"});
    const std::string text = "a-b--c";
    std::vector<PreToken> out;
    pre.split(text, 0, text.size(), out);
    std::vector<std::string> pieces;
    for (const auto& w : out) pieces.push_back(text.substr(w.begin, w.end - w.begin));
    return pieces;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(words("Isolated"), (V{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(words("Removed"), (V{"a", "b", "c"}));
  EXPECT_EQ(words("MergedWithPrevious"), (V{"a-", "b-", "-", "c"}));
  EXPECT_EQ(words("MergedWithNext"), (V{"a", "-b", "-", "-c"}));
  EXPECT_EQ(words("Contiguous"), (V{"a", "-", "b", "--", "c"}));
  EXPECT_EQ(words("Removed", true), (V{"-", "-", "-"}));  // invert: the text between is the delimiter
  EXPECT_NE(message_of([&] { words("Dropped"); }).find("test: pre_tokenizer.behavior is \"Dropped\""), std::string::npos);
}

// Without byte fallback a character outside the vocabulary is the unknown token; fuse_unk makes
// one of a run of them, covering all their bytes.
TEST(HfTokenizer, UnknownCharactersBecomeTheUnknownToken) {
  TempDir dir;
  for (const bool fuse : {false, true}) {
    const std::string path = edited_fixture(dir, [&](nlohmann::json& j) {
      j["model"]["byte_fallback"] = false;
      j["model"]["unk_token"] = "?";
      j["model"]["fuse_unk"] = fuse;
    });
    const auto t = load_tokenizer(path);
    const int64_t unk = *t->token_to_id("?"), x = *t->token_to_id("x");
    const Encoding e = t->encode_with_spans("\xC3\xA9\xE2\x82\xACx", false);  // "é€x"
    if (fuse) {
      EXPECT_EQ(e.ids, (std::vector<int64_t>{unk, x}));
      EXPECT_EQ(e.spans[0].end, 5u);
    } else {
      EXPECT_EQ(e.ids, (std::vector<int64_t>{unk, unk, x}));
      EXPECT_EQ(e.spans[1].begin, 2u);
    }
  }
}

// What a model generated decodes even when it holds ids past the tokenizer (a model's padded
// vocabulary): those read "<id:N>", the rest as decode() reads them, special tokens skipped.
TEST(HfTokenizer, GeneratedIdsPastTheVocabularyAreNamed) {
  auto t = load_tokenizer(LOOM_FIXTURES_DIR "/data/tokenizers/byte_fallback");
  const std::vector<int64_t> hello = t->encode("hello", false), world = t->encode(" world", false);
  std::vector<int64_t> ids = hello;
  ids.push_back(t->vocab_size() + 5);
  ids.insert(ids.end(), world.begin(), world.end());
  ids.push_back(t->eos_id());
  // (This tokenizer's pre-tokenizer removes whitespace: "hello world" encodes as helloworld.)
  EXPECT_EQ(t->decode_generated(ids), "hello<id:" + std::to_string(t->vocab_size() + 5) + ">world");
  EXPECT_THROW(t->decode(ids), loom::DataError);
  // Byte tokens after the mark complete a character its text ended inside of: the mark moves to
  // the next character boundary, so the text stays UTF-8 ("é" is C3 A9).
  const int64_t c3 = *t->token_to_id("<0xC3>"), a9 = *t->token_to_id("<0xA9>");
  EXPECT_EQ(t->decode_generated({c3, t->vocab_size() + 1, a9, c3, a9}),
            "\xC3\xA9\xC3\xA9<id:" + std::to_string(t->vocab_size() + 1) + ">");
}
