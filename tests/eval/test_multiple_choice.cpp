// Multiple-choice scoring (loom/eval/multiple_choice.h): log-likelihoods, acc and acc_norm on a
// hand-checked example whose logits are known, batching and padding that change nothing, the
// harness's split of text into context and choice, and file errors that name the line.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/data/tokenizer/tokenizer.h"
#include "loom/eval/multiple_choice.h"
#include "testing/temp_dir.h"

namespace loom::eval {
namespace {

namespace lt = loom::testing;

constexpr int64_t kV = 5;

// Logits that give the next token t + 1 (mod 5) probability 4/8 and every other 1/8.
Tensor successor_logits(const data::Batch& batch) {
  const int64_t B = batch.input_ids.size(0), S = batch.input_ids.size(1);
  const std::vector<int64_t> ids = batch.input_ids.to_int_vector();
  std::vector<float> out(static_cast<size_t>(B * S * kV), 0.f);
  for (int64_t t = 0; t < B * S; ++t) out[static_cast<size_t>(t * kV + (ids[static_cast<size_t>(t)] + 1) % kV)] = std::log(4.f);
  return Tensor::from_vector(out, {B, S, kV});
}

std::vector<ChoiceExample> hand_checked() {
  // Context [0]. Choice A = [3]: one unlikely token, ll = ln 1/8. Choice B = [1, 2, 3, 4]: four
  // likely tokens, ll = 4 ln 1/2: A wins on the sum, B per token.
  ChoiceExample e;
  e.context = {0};
  e.choices = {{3}, {1, 2, 3, 4}};
  e.lengths = {1, 4};
  e.label = 1;
  ChoiceExample f;  // context [2]: [3] is likely (ln 1/2), [4] not (ln 1/8); label 0
  f.context = {2};
  f.choices = {{3}, {4}};
  f.lengths = {1, 1};
  f.label = 0;
  return {e, f};
}

TEST(MultipleChoice, HandCheckedLogLikelihoodsAccAndAccNorm) {
  ScoringOptions o;
  o.batch_size = 2;
  o.max_length = 16;
  const ChoiceScores s = score_choices(hand_checked(), successor_logits, o);
  ASSERT_EQ(s.log_likelihoods.size(), 2u);
  EXPECT_NEAR(s.log_likelihoods[0][0], std::log(1.0 / 8), 1e-6);
  EXPECT_NEAR(s.log_likelihoods[0][1], 4 * std::log(0.5), 1e-6);
  EXPECT_NEAR(s.log_likelihoods[1][0], std::log(0.5), 1e-6);
  EXPECT_NEAR(s.log_likelihoods[1][1], std::log(1.0 / 8), 1e-6);
  EXPECT_EQ(s.examples, 2);
  EXPECT_EQ(s.requests, 4);
  EXPECT_EQ(s.tokens, 1 + 4 + 1 + 1);  // inputs: context + choice, less the last, of each pair
  EXPECT_DOUBLE_EQ(s.acc, 0.5);       // example 1 picks A by sum, wrongly
  EXPECT_DOUBLE_EQ(s.acc_norm, 1.0);  // per token, B
}

TEST(MultipleChoice, BatchingAndPaddingChangeNothing) {
  ScoringOptions one, three;
  one.batch_size = 1;
  one.max_length = 16;
  three = one;
  three.batch_size = 3;
  three.length_multiple = 8;  // padded further, as a context-parallel layout pads
  const ChoiceScores a = score_choices(hand_checked(), successor_logits, one);
  const ChoiceScores b = score_choices(hand_checked(), successor_logits, three);
  EXPECT_EQ(a.log_likelihoods, b.log_likelihoods);
}

TEST(MultipleChoice, LongSequencesKeepTheirLastTokens) {
  ChoiceExample e;
  e.context = {0, 1, 2, 3, 4, 0, 1};
  e.choices = {{2, 3}, {4, 4}};
  e.lengths = {2, 2};
  ScoringOptions o;
  o.max_length = 3;  // inputs [4, 0, 1, 2] cut to the last 3: the choice's two targets still scored
  const ChoiceScores s = score_choices({e}, successor_logits, o);
  EXPECT_NEAR(s.log_likelihoods[0][0], 2 * std::log(0.5), 1e-6);
  EXPECT_NEAR(s.log_likelihoods[0][1], std::log(1.0 / 8) * 2, 1e-6);
}

TEST(MultipleChoice, TextIsSplitAsTheHarnessSplitsIt) {
  lt::TempDir dir;
  auto tokenizer = data::load_tokenizer(LOOM_FIXTURES_DIR "/data/tokenizers/byte_fallback");
  const std::string file = dir.file("q.jsonl");
  lt::write_file(file, "{\"context\": \"The cat \", \"choices\": [\"sat\", \"ran away\"], \"label\": 0}\n");
  const std::vector<ChoiceExample> ex = read_choices(file, tokenizer.get(), tokenizer->vocab_size());
  ASSERT_EQ(ex.size(), 1u);
  // The context's trailing space goes with each choice; lengths are the choices' characters.
  EXPECT_EQ(ex[0].context, tokenizer->encode("The cat", false));
  for (size_t c = 0; c < 2; ++c) {
    const std::string choice = c == 0 ? "sat" : "ran away";
    const std::vector<int64_t> whole = tokenizer->encode("The cat " + choice, false);
    EXPECT_EQ(ex[0].choices[c], std::vector<int64_t>(whole.begin() + static_cast<std::ptrdiff_t>(ex[0].context.size()),
                                                     whole.end()));
    EXPECT_EQ(ex[0].lengths[c], static_cast<double>(choice.size()));
  }
}

TEST(MultipleChoice, BadLinesAreNamed) {
  lt::TempDir dir;
  auto error_of = [&](const std::string& text, const data::Tokenizer* tokenizer = nullptr) {
    const std::string file = dir.file("bad.jsonl");
    lt::write_file(file, text);
    try {
      read_choices(file, tokenizer, kV);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string ok = "{\"context_ids\": [0], \"choices_ids\": [[1], [2]], \"label\": 1}\n";
  EXPECT_NE(error_of(ok + "{\"context_ids\": [0], \"choices_ids\": [[1], [2]], \"label\": 2}\n")
                .find("bad.jsonl:2: label must be the index of the right choice, 0 to 1, got 2"),
            std::string::npos);
  EXPECT_NE(error_of("{\"context_ids\": [0], \"choices_ids\": [[1], [7]], \"label\": 0}\n")
                .find("bad.jsonl:1: choice holds token id 7 outside the model's vocabulary [0, 5)"),
            std::string::npos);
  EXPECT_NE(error_of("{\"context_ids\": [0], \"choices_ids\": [[1]], \"label\": 0}\n")
                .find("needs at least two choices"),
            std::string::npos);
  EXPECT_NE(error_of("{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"label\": 0}\n").find("pass --tokenizer PATH"),
            std::string::npos);
  EXPECT_NE(error_of("{\"context_ids\": [0], \"label\": 0}\n").find("has no \"choices_ids\""), std::string::npos);
  EXPECT_NE(error_of("not json\n").find("bad.jsonl:1"), std::string::npos);
  EXPECT_NE(error_of("\n").find("holds no example"), std::string::npos);
}

}  // namespace
}  // namespace loom::eval
