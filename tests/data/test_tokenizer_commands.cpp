// `loom tokenizer encode|decode|chat|info` and `loom preprocess --tokenizer` with a Hugging Face
// tokenizer (the byte-fallback fixture, or a fetched model when present).
#include <gtest/gtest.h>

#include <iostream>
#include <sstream>

#include "loom/data/data_cli.h"
#include "loom/data/indexed_dataset.h"
#include "loom/data/preprocess.h"
#include "loom/data/tokenizer/tokenizer.h"
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

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t end = text.find('\n'); end != std::string::npos; start = end + 1, end = text.find('\n', start)) {
    lines.push_back(text.substr(start, end - start));
  }
  return lines;
}

std::string run_captured(const std::vector<std::string>& args) {
  ::testing::internal::CaptureStdout();
  const int rc = run_tokenizer_command(args);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  return out;
}

}  // namespace

TEST(TokenizerCommands, EncodeDecodeChatRoundTrip) {
  TempDir dir;
  const std::string folder = fixture_tokenizer("byte_fallback");
  const auto t = load_tokenizer(folder);
  write_file(dir.file("in.jsonl"), "{\"text\": \"the string\"}\n\n{\"text\": \"caf\\u00e9 42\"}\n");
  const auto encoded = lines_of(run_captured({"encode", "--tokenizer", folder, "--input", dir.file("in.jsonl")}));
  ASSERT_EQ(encoded.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(encoded[0])["ids"].get<std::vector<int64_t>>(), t->encode("the string"));
  const auto spans = lines_of(run_captured({"encode", "--tokenizer", folder, "--input", dir.file("in.jsonl"),
                                            "--no-special-tokens", "--with-spans"}));
  const auto second = nlohmann::json::parse(spans[1]);
  EXPECT_EQ(second["ids"].get<std::vector<int64_t>>(), t->encode("caf\xC3\xA9 42", false));
  EXPECT_EQ(second["spans"][0], nlohmann::json::array({0, 1}));

  write_file(dir.file("ids.jsonl"), encoded[0] + "\n" + nlohmann::json(t->encode("caf\xC3\xA9", false)).dump() + "\n");
  const auto decoded = lines_of(run_captured({"decode", "--tokenizer", folder, "--input", dir.file("ids.jsonl"),
                                              "--skip-special-tokens"}));
  ASSERT_EQ(decoded.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(decoded[0])["text"], "thestring");  // the fixture drops whitespace
  EXPECT_EQ(nlohmann::json::parse(decoded[1])["text"], "caf\xC3\xA9");
  EXPECT_EQ(run_captured({"decode", "--tokenizer", folder, "--input", dir.file("ids.jsonl"), "--raw"}),
            "<s>thestring</s>\ncaf\xC3\xA9\n");

  // A line's own keys are template variables; add_generation_prompt may come from the line too.
  write_file(dir.file("chat.jsonl"), R"({"messages": [{"role": "user", "content": "hi"}], "tools": null})" "\n"
                                     R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true})" "\n");
  const auto chats = lines_of(run_captured({"chat", "--tokenizer", folder, "--input", dir.file("chat.jsonl"),
                                            "--add-generation-prompt"}));
  ASSERT_EQ(chats.size(), 2u);
  const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  ChatOptions options;
  options.add_generation_prompt = true;
  for (const auto& line : chats) {
    const auto chat = nlohmann::json::parse(line);
    EXPECT_EQ(chat["text"], t->apply_chat_template(messages, options));
    EXPECT_EQ(chat["ids"].get<std::vector<int64_t>>(), t->encode(chat["text"].get<std::string>(), false));
  }
  const auto without_flag = lines_of(run_captured({"chat", "--tokenizer", folder, "--input", dir.file("chat.jsonl")}));
  EXPECT_EQ(nlohmann::json::parse(without_flag[0])["text"], t->apply_chat_template(messages));
  EXPECT_EQ(nlohmann::json::parse(without_flag[1])["text"], t->apply_chat_template(messages, options));

  // Without --input the lines come from stdin.
  std::istringstream stdin_lines("{\"text\": \"the string\"}\n");
  auto* saved = std::cin.rdbuf(stdin_lines.rdbuf());
  const std::string from_stdin = run_captured({"encode", "--tokenizer", folder});
  std::cin.rdbuf(saved);
  EXPECT_EQ(from_stdin, encoded[0] + "\n");

  const std::string info = run_captured({"info", "--tokenizer", folder});
  EXPECT_NE(info.find("(tokenizer.json): vocab_size 338"), std::string::npos) << info;
  EXPECT_NE(info.find("eos (eod) 336 </s>"), std::string::npos) << info;
}

TEST(TokenizerCommands, BadInputNamesTheLine) {
  TempDir dir;
  const std::string folder = fixture_tokenizer("byte_fallback");
  write_file(dir.file("bad.jsonl"), "{\"text\": \"ok\"}\n{\"text\": \n");
  ::testing::internal::CaptureStdout();
  const std::string bad = message_of([&] { run_tokenizer_command({"encode", "--tokenizer", folder, "--input", dir.file("bad.jsonl")}); });
  ::testing::internal::GetCapturedStdout();
  EXPECT_NE(bad.find(dir.file("bad.jsonl") + ":2: invalid JSON"), std::string::npos) << bad;
  write_file(dir.file("chat.jsonl"), "{\"conversation\": []}\n");
  EXPECT_NE(message_of([&] { run_tokenizer_command({"chat", "--tokenizer", folder, "--input", dir.file("chat.jsonl")}); })
                .find(":1: expected {\"messages\": [...]}"),
            std::string::npos);
  write_file(dir.file("alone/tokenizer.json"), read_file(folder + "/tokenizer.json"));
  write_file(dir.file("chat.jsonl"), "{\"messages\": []}\n");
  EXPECT_NE(message_of([&] { run_tokenizer_command({"chat", "--tokenizer", dir.file("alone"), "--input", dir.file("chat.jsonl")}); })
                .find("has no chat template"),
            std::string::npos);
  EXPECT_NE(message_of([&] { run_tokenizer_command({"encode"}); }).find("--tokenizer is required"), std::string::npos);
}

// `loom preprocess --tokenizer FOLDER` with a tokenizer.json: each document is encode(text) (the
// template's <s> ... </s> included) and the EOD is tokenizer_config.json's eos_token; the worker
// count does not change the output. --tokenizer-model is the same flag.
TEST(TokenizerCommands, PreprocessWithHuggingFaceTokenizer) {
  TempDir dir;
  const std::string folder = fixture_tokenizer("byte_fallback");
  write_file(dir.file("docs.jsonl"), "{\"text\": \"the string 12\"}\n{\"text\": \"\"}\n{\"text\": \"caf\\u00e9\"}\n");
  PreprocessOptions o;
  o.input = dir.file("docs.jsonl");
  o.output_prefix = dir.file("one");
  o.tokenizer = folder;
  o.append_eod = true;
  o.workers = 1;
  o.progress = false;
  const auto one = preprocess_jsonl(o);
  o.output_prefix = dir.file("three");
  o.workers = 3;
  const auto three = preprocess_jsonl(o);
  EXPECT_EQ(read_file(data_file_path(one.output_prefixes[0])), read_file(data_file_path(three.output_prefixes[0])));
  const auto t = load_tokenizer(folder);
  IndexedDataset ds(one.output_prefixes[0]);
  ASSERT_EQ(ds.num_documents(), 3);
  auto first = t->encode("the string 12");
  first.push_back(t->eos_id());
  EXPECT_EQ(ds.get(0), first);

  ::testing::internal::CaptureStdout();
  const int rc = run_preprocess_command({"--input", dir.file("docs.jsonl"), "--output-prefix", dir.file("alias"),
                                         "--tokenizer-model", folder + "/tokenizer.json", "--workers", "2", "--quiet"});
  ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  // A tokenizer.json alone names no eos token: --append-eod has nothing to append.
  TempDir alone;
  write_file(alone.file("tokenizer.json"), read_file(folder + "/tokenizer.json"));
  o.tokenizer = alone.file("tokenizer.json");
  EXPECT_NE(message_of([&] { preprocess_jsonl(o); }).find("has no end-of-sequence id"), std::string::npos);
}

// A real model's folder through preprocess, when fetched: Qwen3's documents end with <|im_end|>.
TEST(TokenizerCommands, PreprocessWithQwen3) {
  LOOM_REFERENCE_OR_SKIP(reference, "qwen3");
  TempDir dir;
  std::string jsonl;
  for (const auto& c : reference["texts"]) jsonl += nlohmann::json({{"text", c["text"]}}).dump() + "\n";
  write_file(dir.file("docs.jsonl"), jsonl);
  PreprocessOptions o;
  o.input = dir.file("docs.jsonl");
  o.output_prefix = dir.file("qwen");
  o.tokenizer = tokenizer_folder("qwen3");
  o.append_eod = true;
  o.workers = 2;
  o.progress = false;
  const auto r = preprocess_jsonl(o);
  IndexedDataset ds(r.output_prefixes[0]);
  EXPECT_EQ(ds.dtype(), TokenDType::i32);  // 151669 ids do not fit uint16
  ASSERT_EQ(ds.num_documents(), static_cast<int64_t>(reference["texts"].size()));
  const auto docs = ds.document_indices();
  for (size_t d = 0; d < reference["texts"].size(); ++d) {
    auto expected = reference["texts"][d]["ids"].get<std::vector<int64_t>>();
    if (expected.empty()) continue;
    expected.push_back(151645);
    EXPECT_EQ(ds.get(docs[d]), expected) << "document " << d;
  }
}
