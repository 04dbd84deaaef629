// Generation (loom/runtime/generation.h): greedy tokens with the KV cache are the tokens of a
// decode that re-runs the whole sequence each step, for the four architectures; prompts batched
// together give what each gives alone; sampling is reproducible by seed and independent of the
// thread count; rows stop at an end token, the caller's stop and the model's positions.
// Speculative decoding with DeepSeek-V3's MTP layers gives plain greedy's tokens, batched or
// alone, with one or two MTP depths; on a model trained on token patterns most drafts are kept.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../models/model_test_util.h"
#include "loom/autograd/engine.h"
#include "loom/core/parallel.h"
#include "loom/models/registry.h"
#include "loom/optim/adamw.h"
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

// --- Speculative decoding with the MTP layers ---

std::shared_ptr<nn::CausalLM> deepseek_with_mtp(int64_t depth, Json section = loom::testing::tiny_deepseek_v3()) {
  section["num_nextn_predict_layers"] = depth;
  return built(section);
}

// What the speculative counts must satisfy whatever the drafts: each forward gives a generating
// row its token plus the drafts it kept.
void expect_consistent_counts(const GenerationStats& s) {
  EXPECT_EQ(s.generated_tokens, s.row_forwards + s.accepted_tokens);
  EXPECT_LE(s.accepted_tokens, s.drafted_tokens);
  EXPECT_GT(s.drafted_tokens, 0);
}

TEST(Generation, SpeculativeMtpGivesPlainGreedysTokens) {
  // The main model checks every draft, so the tokens are greedy's whatever the (here untrained)
  // MTP layers draft: batched, alone, with one and two depths, short and long.
  for (int64_t depth : {1, 2}) {
    auto m = deepseek_with_mtp(depth);
    TokenGenerator generator(*m, 32);
    for (int64_t length : {1, 2, 7, 20}) {
      GenerationOptions plain;
      plain.max_new_tokens = length;
      GenerationOptions speculative = plain;
      speculative.speculative = Speculative::mtp;
      const std::vector<Generation> expected = generator.generate(kPrompts, plain);
      EXPECT_EQ(generator.last_stats().row_forwards, generator.last_stats().generated_tokens);
      const std::vector<Generation> reference = generate_without_cache(whole_model(*m), kPrompts, plain, 32);
      const std::vector<Generation> got = generator.generate(kPrompts, speculative);
      if (length > 2) expect_consistent_counts(generator.last_stats());  // drafts from the third token
      for (size_t r = 0; r < kPrompts.size(); ++r) {
        EXPECT_EQ(got[r].ids, expected[r].ids) << "depth " << depth << " length " << length << " prompt " << r;
        EXPECT_EQ(got[r].ids, reference[r].ids) << "depth " << depth << " length " << length << " prompt " << r;
        EXPECT_EQ(got[r].finish_reason, expected[r].finish_reason);
        EXPECT_EQ(generator.generate({kPrompts[r]}, speculative)[0].ids, expected[r].ids)
            << "depth " << depth << " length " << length << " prompt " << r << " alone";
      }
    }
  }
}

// Arithmetic token sequences t_i = (a + i·s) mod 21 + 3, s in 1..3: two tokens fix the rest, so
// the main head and the MTP heads can learn them.
std::vector<int64_t> pattern(int64_t a, int64_t stride, int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back((a + i * stride) % 21 + 3);
  return out;
}

// A tiny DeepSeek-V3 with `depth` MTP layers after `steps` AdamW steps on batches of patterns.
std::shared_ptr<nn::CausalLM> trained_on_patterns(int64_t depth, int steps) {
  Json section = loom::testing::tiny_deepseek_v3();
  section["hidden_size"] = 32;
  section["mtp_loss_scaling_factor"] = 1.0;
  auto m = deepseek_with_mtp(depth, section);
  optim::NamedParams params;
  for (auto& [name, p] : m->named_parameters()) params.push_back({name, p->tensor});
  optim::AdamWOptions ao;
  ao.learning_rate = 1e-2;
  ao.weight_decay = 0;
  optim::AdamW opt(params, ao);
  constexpr int64_t B = 8, S = 16;
  for (int step = 0; step < steps; ++step) {
    std::vector<int64_t> ids, labels;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t i = step * B + b;  // every (start, stride) pair once in 63 sequences
      const std::vector<int64_t> p = pattern(i / 3 % 21, 1 + i % 3, S + 1);
      ids.insert(ids.end(), p.begin(), p.end() - 1);
      labels.insert(labels.end(), p.begin() + 1, p.end());
    }
    nn::LMBatch batch;
    batch.input_ids = Tensor::from_vector(ids, {B, S});
    batch.labels = Tensor::from_vector(labels, {B, S});
    autograd::backward(m->forward(batch).loss);
    opt.step();
    opt.zero_grad();
  }
  return m;
}

TEST(Generation, SpeculativeMtpOnATrainedModelKeepsMostDrafts) {
  const int64_t starts[] = {2, 7, 11};
  const std::vector<std::vector<int64_t>> prompts = {pattern(2, 1, 4), pattern(7, 2, 3), pattern(11, 3, 5)};
  for (int64_t depth : {1, 2}) {
    auto m = trained_on_patterns(depth, 300);
    TokenGenerator generator(*m, 32);
    GenerationOptions plain;
    plain.max_new_tokens = 16;
    GenerationOptions speculative = plain;
    speculative.speculative = Speculative::mtp;
    const std::vector<Generation> expected = generator.generate(prompts, plain);
    const std::vector<Generation> got = generator.generate(prompts, speculative);
    const GenerationStats s = generator.last_stats();
    expect_consistent_counts(s);
    int64_t on_pattern = 0, tokens = 0;
    for (size_t r = 0; r < prompts.size(); ++r) {
      EXPECT_EQ(got[r].ids, expected[r].ids) << "depth " << depth << " prompt " << r;
      const std::vector<int64_t> whole = pattern(starts[r], 1 + static_cast<int64_t>(r), prompts[r].size() + 16);
      for (size_t t = 0; t < expected[r].ids.size(); ++t, ++tokens)
        on_pattern += expected[r].ids[t] == whole[prompts[r].size() + t];
    }
    const double acceptance = static_cast<double>(s.accepted_tokens) / s.drafted_tokens;
    const double per_forward = static_cast<double>(s.generated_tokens) / s.row_forwards;
    std::printf("depth %lld: %lld of %lld tokens continue the pattern; %lld of %lld drafts kept (%.2f), %.2f tokens "
                "per forward\n", (long long)depth, (long long)on_pattern, (long long)tokens,
                (long long)s.accepted_tokens, (long long)s.drafted_tokens, acceptance, per_forward);
    // The model learned the patterns (an untrained one continues almost none), and its MTP heads
    // with it: most drafts are the main model's own tokens, so a forward gives well over one.
    EXPECT_GE(on_pattern, tokens * 3 / 4);
    EXPECT_GE(acceptance, 0.75);
    EXPECT_GE(per_forward, 1.5);
  }
}

}  // namespace
}  // namespace loom::runtime
