// SentencePiece tokenizer, `loom tokenizer train` and `loom preprocess` (Megatron's
// tools/preprocess_data.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "data_test_util.h"
#include "loom/core/error.h"
#include "loom/data/data_cli.h"
#include "loom/data/indexed_dataset.h"
#include "loom/data/preprocess.h"
#include "loom/data/tokenizer/sentencepiece_tokenizer.h"
#include "loom/data/tokenizer/tokenizer.h"

using namespace loom::data;
using namespace loom::data::testing_util;
using loom::testing::TempDir;
using loom::testing::read_file;

namespace {

const std::string kCorpus = std::string(LOOM_FIXTURES_DIR) + "/data/tiny_corpus.jsonl";
const std::string kBadLine = std::string(LOOM_FIXTURES_DIR) + "/data/bad_line.jsonl";

// One small model for the whole test program (training takes about a second).
const std::string& tiny_model() {
  static std::unique_ptr<TempDir> dir;
  static std::string path;
  if (path.empty()) {
    dir = std::make_unique<TempDir>("loom-spm");
    TokenizerTrainOptions o;
    o.input = kCorpus;
    o.vocab_size = 160;
    o.byte_fallback = false;
    o.model_prefix = dir->file("tiny");
    path = train_tokenizer(o);
  }
  return path;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const loom::Error& e) {
    return e.what();
  }
  return "<no error>";
}

PreprocessOptions preprocess_options(const std::string& out, int64_t workers, bool eod) {
  PreprocessOptions o;
  o.input = kCorpus;
  o.output_prefix = out;
  o.tokenizer = tiny_model();
  o.append_eod = eod;
  o.workers = workers;
  o.progress = false;
  return o;
}

}  // namespace

// A continuation decoded after its prompt keeps the space SentencePiece drops at a text's start:
// the prompt's text plus the continuation's is the whole sequence's text.
TEST(Tokenizer, GeneratedTextAfterAPromptKeepsItsLeadingSpace) {
  const auto t = load_tokenizer(tiny_model());
  const auto prompt = t->encode("The red train", false), rest = t->encode(" watched the harbour", false);
  std::vector<int64_t> all = prompt;
  all.insert(all.end(), rest.begin(), rest.end());
  EXPECT_EQ(t->decode_generated(rest), "watched the harbour");  // alone: the leading space goes
  EXPECT_EQ(t->decode_generated(rest, prompt), " watched the harbour");
  EXPECT_EQ(t->decode(prompt) + t->decode_generated(rest, prompt), t->decode(all));
}

TEST(Tokenizer, SpecialIdsAndRoundTrip) {
  const auto loaded = load_tokenizer(tiny_model());
  const Tokenizer& t = *loaded;
  EXPECT_EQ(t.kind(), "sentencepiece");
  EXPECT_EQ(t.vocab_size(), 160);
  EXPECT_EQ(t.unk_id(), 0);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eod_id(), 2);
  EXPECT_EQ(t.pad_id(), -1);
  const std::string text = "The red train watched the harbour lights.";
  const auto ids = t.encode(text);
  EXPECT_GT(ids.size(), 3u);
  EXPECT_LT(ids.size(), text.size());
  EXPECT_EQ(t.decode(ids), text);
  EXPECT_NE(error_of([] { load_tokenizer("/nonexistent/m.model"); }).find("/nonexistent/m.model does not exist"),
            std::string::npos);
}

// preprocess_data.py: {prefix}_{key}_document, one document per line, EOD appended to non-empty
// documents, list values are sentences (empty ones dropped), empty documents kept as empty entries.
TEST(Preprocess, WritesMegatronDocuments) {
  TempDir dir;
  const PreprocessResult r = preprocess_jsonl(preprocess_options(dir.file("out/corpus"), 1, true));
  ASSERT_EQ(r.output_prefixes, (std::vector<std::string>{dir.file("out/corpus") + "_text_document"}));
  EXPECT_EQ(r.documents, 39);
  IndexedDataset ds(r.output_prefixes[0]);
  EXPECT_EQ(ds.dtype(), TokenDType::u16);  // vocabulary 160 < 65500
  EXPECT_EQ(ds.num_documents(), 39);
  EXPECT_EQ(ds.num_tokens(), r.tokens[0]);
  const auto loaded = load_tokenizer(tiny_model());
  const Tokenizer& t = *loaded;
  const auto docs = ds.document_indices();
  // Line 1: one sequence = encode(text) + eod.
  auto first = t.encode(nlohmann::json::parse(read_file(kCorpus).substr(0, read_file(kCorpus).find('\n')))["text"].get<std::string>());
  first.push_back(2);
  EXPECT_EQ(ds.get(0), first);
  // Line 37: ["A list holds sentences.", "", "Each one is encoded on its own."] -> 2 sequences, the
  // last carrying the EOD.
  const int64_t list_doc = 36;
  ASSERT_EQ(docs[list_doc + 1] - docs[list_doc], 2);
  EXPECT_EQ(ds.get(docs[list_doc]), t.encode("A list holds sentences."));
  auto second = t.encode("Each one is encoded on its own.");
  second.push_back(2);
  EXPECT_EQ(ds.get(docs[list_doc] + 1), second);
  // Line 38: empty text -> an empty document (no sequences, no EOD).
  EXPECT_EQ(docs[38], docs[37]);
  // Every non-empty document ends with the EOD.
  for (int64_t d = 0; d < ds.num_documents(); ++d) {
    if (docs[d + 1] == docs[d]) continue;
    const auto last = ds.get(docs[d + 1] - 1);
    EXPECT_EQ(last.back(), 2) << "document " << d;
  }
}

TEST(Preprocess, WorkerCountDoesNotChangeTheOutput) {
  TempDir dir;
  const auto one = preprocess_jsonl(preprocess_options(dir.file("one"), 1, true));
  const auto three = preprocess_jsonl(preprocess_options(dir.file("three"), 3, true));
  EXPECT_EQ(read_file(data_file_path(one.output_prefixes[0])), read_file(data_file_path(three.output_prefixes[0])));
  EXPECT_EQ(read_file(index_file_path(one.output_prefixes[0])), read_file(index_file_path(three.output_prefixes[0])));
  const auto plain = preprocess_jsonl(preprocess_options(dir.file("plain"), 2, false));
  EXPECT_EQ(plain.tokens[0], one.tokens[0] - 38);  // 38 non-empty documents lost their EOD
}

TEST(Preprocess, BadLinesNameFileAndLine) {
  TempDir dir;
  PreprocessOptions o = preprocess_options(dir.file("bad"), 2, true);
  o.input = kBadLine;
  const std::string e = error_of([&] { preprocess_jsonl(o); });
  EXPECT_NE(e.find(kBadLine + ":4: invalid JSON"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad_text_document.bin")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad_text_document.bin.partial")));

  PreprocessOptions keys = preprocess_options(dir.file("keys"), 1, true);
  keys.json_keys = {"text", "id"};
  EXPECT_NE(error_of([&] { preprocess_jsonl(keys); }).find(kCorpus + ":1: \"id\" is a number; expected a string"),
            std::string::npos);
  keys.json_keys = {"body"};
  EXPECT_NE(error_of([&] { preprocess_jsonl(keys); }).find(kCorpus + ":1: no key \"body\""), std::string::npos);
}

// The commands behind `loom tokenizer train` and `loom preprocess`.
// An output folder that cannot be made is named with the fix, not the filesystem library's text.
TEST(Preprocess, AnOutputFolderThatCannotBeMadeIsNamed) {
  TempDir dir;
  loom::testing::write_file(dir.file("a_file"), "not a folder");
  const std::string e = error_of([&] { preprocess_jsonl(preprocess_options(dir.file("a_file/sub/out"), 1, true)); });
  EXPECT_NE(e.find("--output-prefix " + dir.file("a_file/sub/out") + ": cannot create its folder"), std::string::npos)
      << e;
  EXPECT_EQ(e.find("filesystem error"), std::string::npos) << e;
}

TEST(DataCommands, TokenizerTrainAndPreprocess) {
  TempDir dir;
  testing::internal::CaptureStdout();
  const int train_rc = run_tokenizer_command({"train", "--input", kCorpus, "--json-keys", "text", "--vocab-size", "150",
                                              "--model-prefix", dir.file("spm/m"), "--no-byte-fallback"});
  const int pre_rc = run_preprocess_command({"--input", kCorpus, "--output-prefix", dir.file("data/c"),
                                             "--tokenizer-model", dir.file("spm/m.model"), "--append-eod",
                                             "--workers", "2", "--quiet"});
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(train_rc, 0);
  EXPECT_EQ(pre_rc, 0);
  EXPECT_NE(out.find("150 pieces; eod 2"), std::string::npos) << out;
  EXPECT_NE(out.find("c_text_document.bin/.idx: 39 documents"), std::string::npos) << out;
  EXPECT_EQ(IndexedDataset(dir.file("data/c_text_document")).num_documents(), 39);
  EXPECT_NE(error_of([&] { run_preprocess_command({"--input", kCorpus, "--bogus", "1"}); }).find("unknown option '--bogus'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { run_preprocess_command({"--input", kCorpus}); }).find("--output-prefix is required"),
            std::string::npos);
  EXPECT_NE(error_of([&] { run_preprocess_command({"--input", kCorpus, "--output-prefix", "x", "--tokenizer-model",
                                                   "y", "--workers", "two"}); })
                .find("--workers: 'two' is not an integer"),
            std::string::npos);
}
