// Generation (loom/runtime/generation.h): greedy tokens with the KV cache are the tokens of a
// decode that re-runs the whole sequence each step, for the four architectures; prompts batched
// together give what each gives alone; sampling is reproducible by seed and independent of the
// thread count; rows stop at an end token, the caller's stop and the model's positions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../models/model_test_util.h"
#include "loom/core/parallel.h"
#include "loom/models/registry.h"
#include "loom/runtime/generation.h"

namespace loom::runtime {
namespace {

using loom::testing::Json;

std::shared_ptr<nn::CausalLM> built(Json section) {
  section["max_position_embeddings"] = 32;
  models::BuiltModel b = models::build_model(section);
  b.model->materialize(21);
  return b.model;
}

const std::vector<std::vector<int64_t>> kPrompts = {{3, 7, 1, 9, 4}, {11, 2}, {5, 5, 8}};

SequenceLogits whole_model(nn::CausalLM& m) {
  return [&m](const data::Batch& b) { return m.logits(b.input_ids, b.position_ids, b.document_ends); };
}

TEST(Generation, GreedyWithTheCacheIsGreedyWithout) {
  const std::pair<const char*, Json> archs[] = {{"llama", loom::testing::tiny_llama()},
                                                {"qwen3", loom::testing::tiny_qwen3()},
                                                {"qwen3_moe", loom::testing::tiny_qwen3_moe()},
                                                {"deepseek_v3", loom::testing::tiny_deepseek_v3()}};
  GenerationOptions o;
  o.max_new_tokens = 12;
  for (const auto& [name, section] : archs) {
    auto m = built(section);
    TokenGenerator generator(*m, 32);
    const std::vector<Generation> cached = generator.generate(kPrompts, o);
    const std::vector<Generation> reference = generate_without_cache(whole_model(*m), kPrompts, o, 32);
    for (size_t r = 0; r < kPrompts.size(); ++r) {
      EXPECT_EQ(cached[r].ids, reference[r].ids) << name << " prompt " << r;
      EXPECT_EQ(cached[r].ids.size(), 12u) << name;
      EXPECT_EQ(cached[r].finish_reason, "length");
    }
    // Batched prompts give what each prompt gives alone.
    for (size_t r = 0; r < kPrompts.size(); ++r)
      EXPECT_EQ(generator.generate({kPrompts[r]}, o)[0].ids, cached[r].ids) << name << " prompt " << r << " alone";
    EXPECT_GT(generator.last_stats().cache_bytes, 0);
  }
}

TEST(Generation, SamplingIsReproducibleBySeedWhateverTheThreads) {
  auto m = built(loom::testing::tiny_qwen3());
  GenerationOptions o;
  o.max_new_tokens = 10;
  o.sampling.temperature = 0.9;
  o.sampling.top_k = 8;
  o.sampling.top_p = 0.9;
  o.sampling.seed = 7;
  TokenGenerator generator(*m, 32);
  const int threads = num_threads();
  set_num_threads(1);
  const auto one = generator.generate(kPrompts, o);
  set_num_threads(2);
  const auto two = generator.generate(kPrompts, o);
  set_num_threads(threads);
  for (size_t r = 0; r < kPrompts.size(); ++r) EXPECT_EQ(one[r].ids, two[r].ids);
  // The cache-free decode draws the same numbers.
  const auto reference = generate_without_cache(whole_model(*m), kPrompts, o, 32);
  for (size_t r = 0; r < kPrompts.size(); ++r) EXPECT_EQ(one[r].ids, reference[r].ids);
  o.sampling.seed = 8;
  const auto other = generator.generate(kPrompts, o);
  bool differs = false;
  for (size_t r = 0; r < kPrompts.size(); ++r) differs = differs || other[r].ids != one[r].ids;
  EXPECT_TRUE(differs) << "another seed draws other tokens";
}

TEST(Generation, SampleTokenRules) {
  const std::vector<float> logits = {0.f, 3.f, 1.f, 3.f, -2.f};
  SamplingOptions greedy;
  EXPECT_EQ(sample_token(logits.data(), 5, greedy, 0, 0), 1);  // the first of equal maxima
  SamplingOptions top1;
  top1.temperature = 1.0;
  top1.top_k = 1;
  for (uint64_t step = 0; step < 20; ++step) EXPECT_EQ(sample_token(logits.data(), 5, top1, 0, step), 1);
  // top_p small keeps the single most likely token; the ties order by id.
  SamplingOptions nucleus;
  nucleus.temperature = 1.0;
  nucleus.top_p = 0.01;
  for (uint64_t step = 0; step < 20; ++step) EXPECT_EQ(sample_token(logits.data(), 5, nucleus, 0, step), 1);
  // Unrestricted sampling follows the softmax: token 4 (e^-2 of Σ ≈ 42.2) is rare, 1 and 3 common.
  SamplingOptions all;
  all.temperature = 1.0;
  std::vector<int> counts(5, 0);
  for (uint64_t step = 0; step < 4000; ++step) ++counts[static_cast<size_t>(sample_token(logits.data(), 5, all, 3, step))];
  const double z = 1 + 2 * std::exp(3.0) + std::exp(1.0) + std::exp(-2.0);
  EXPECT_NEAR(counts[1] / 4000.0, std::exp(3.0) / z, 0.03);
  EXPECT_NEAR(counts[2] / 4000.0, std::exp(1.0) / z, 0.02);
  EXPECT_THROW(sample_token(logits.data(), 5, SamplingOptions{1.0, 0, 0.0, 0}, 0, 0), ValueError);
}

TEST(Generation, RowsStopAtEndTokensTheCallersStopAndThePositions) {
  auto m = built(loom::testing::tiny_llama());
  GenerationOptions o;
  o.max_new_tokens = 8;
  TokenGenerator generator(*m, 32);
  const auto free = generator.generate({kPrompts[0]}, o)[0].ids;
  // An end token: the row ends on it, kept.
  o.end_ids = {free[2]};
  auto ended = generator.generate({kPrompts[0]}, o)[0];
  const size_t first = static_cast<size_t>(std::find(free.begin(), free.end(), free[2]) - free.begin());
  EXPECT_EQ(ended.ids, std::vector<int64_t>(free.begin(), free.begin() + static_cast<std::ptrdiff_t>(first) + 1));
  EXPECT_EQ(ended.finish_reason, "stop");
  // The caller stops a row after its second token.
  o.end_ids.clear();
  int calls = 0;
  auto stopped = generator.generate({kPrompts[0]}, o, [&](size_t, int64_t) { return ++calls == 2; })[0];
  EXPECT_EQ(stopped.ids.size(), 2u);
  EXPECT_EQ(stopped.finish_reason, "stop");
  // 30 prompt tokens in 32 positions leave room for 2.
  const std::vector<int64_t> long_prompt(30, 4);
  auto full = generator.generate({long_prompt}, o)[0];
  EXPECT_EQ(full.ids.size(), 2u);
  EXPECT_EQ(full.finish_reason, "length");
  try {
    generator.generate({std::vector<int64_t>(32, 4)}, o);
    FAIL() << "a prompt as long as the positions";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("prompt 1 has 32 tokens, and the model has 32 positions"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace loom::runtime
