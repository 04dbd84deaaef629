// The loss of a held-out split (loom/runtime/evaluation.h): the token-weighted mean cross-entropy
// over every loss token of K global batches, checked against an independent computation from the
// model's logits (log-softmax in double), and its bookkeeping.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/dist/parallelize.h"
#include "loom/models/registry.h"
#include "loom/runtime/causal_lm_model.h"
#include "loom/runtime/evaluation.h"

namespace loom::runtime {
namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kVocab = 19, kB = 2, kS = 6;

std::unique_ptr<CausalLMModel> tiny_model() {
  models::BuiltModel built = models::build_model(
      Json{{"model_type", "llama"}, {"vocab_size", kVocab}, {"hidden_size", 12}, {"num_layers", 2},
           {"num_attention_heads", 2}, {"num_query_groups", 1}, {"ffn_hidden_size", 20}, {"compute_dtype", "float32"}});
  built.model->materialize(3);
  return std::make_unique<CausalLMModel>(std::move(built.args), std::move(built.model));
}

// Batches whose masks keep different numbers of tokens, so a mean of batch means would differ.
data::Batch batch(int64_t index) {
  data::Batch b;
  std::vector<int32_t> ids, labels;
  std::vector<float> mask;
  for (int64_t i = 0; i < kB * kS; ++i) {
    ids.push_back(static_cast<int32_t>((index * 5 + i * 3) % kVocab));
    labels.push_back(static_cast<int32_t>((index * 7 + i * 2 + 1) % kVocab));
    mask.push_back(i % (index + 2) == 0 ? 0.f : 1.f);
  }
  b.input_ids = Tensor::from_vector(ids, {kB, kS});
  b.labels = Tensor::from_vector(labels, {kB, kS});
  b.loss_mask = Tensor::from_vector(mask, {kB, kS});
  return b;
}

TEST(Evaluation, TokenWeightedLossMatchesAnIndependentComputation) {
  auto model = tiny_model();
  auto parallel = dist::parallelize(model->module(), dist::DeviceMesh::single(), {});
  PlainSchedule schedule(*model, *parallel, 2);  // a global batch of two micro-batches
  int64_t next = 0;
  const LossEvaluation e = evaluate_loss(schedule, [&] { return batch(next++); }, 3, 1);
  EXPECT_EQ(next, 6);
  EXPECT_EQ(e.global_batches, 3);
  EXPECT_EQ(e.input_tokens, 6 * kB * kS);

  // The reference: each batch's logits, log-softmax in double, summed over the unmasked tokens.
  double sum = 0, tokens = 0, mean_of_means = 0;
  for (int64_t k = 0; k < 6; ++k) {
    const data::Batch b = batch(k);
    const std::vector<double> logits = model->logits(b).to_double_vector();
    const std::vector<int64_t> labels = b.labels.to_int_vector();
    const std::vector<float> mask = b.loss_mask.to_float_vector();
    double batch_sum = 0, batch_tokens = 0;
    for (int64_t t = 0; t < kB * kS; ++t) {
      if (mask[static_cast<size_t>(t)] == 0) continue;
      const double* row = logits.data() + t * kVocab;
      double top = row[0], z = 0;
      for (int64_t v = 1; v < kVocab; ++v) top = std::max(top, row[v]);
      for (int64_t v = 0; v < kVocab; ++v) z += std::exp(row[v] - top);
      batch_sum += top + std::log(z) - row[labels[static_cast<size_t>(t)]];
      batch_tokens += 1;
    }
    sum += batch_sum;
    tokens += batch_tokens;
    mean_of_means += batch_sum / batch_tokens / 6;
  }
  EXPECT_EQ(e.loss_tokens, static_cast<int64_t>(tokens));
  EXPECT_NEAR(e.loss, sum / tokens, 1e-6 * sum / tokens);
  EXPECT_NEAR(e.perplexity, std::exp(sum / tokens), 1e-6 * std::exp(sum / tokens));
  // Token-weighted, not the mean of the batches' means.
  EXPECT_GT(std::fabs(e.loss - mean_of_means), 1e-4);
}

TEST(Evaluation, NeedsBatchesAndLossTokens) {
  auto model = tiny_model();
  auto parallel = dist::parallelize(model->module(), dist::DeviceMesh::single(), {});
  PlainSchedule schedule(*model, *parallel, 1);
  EXPECT_THROW(evaluate_loss(schedule, [] { return batch(0); }, 0, 1), ValueError);
  auto masked = [] {
    data::Batch b = batch(1);
    b.loss_mask = Tensor::zeros(b.loss_mask.shape());
    return b;
  };
  try {
    evaluate_loss(schedule, masked, 2, 1);
    FAIL() << "no loss token";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("hold no loss token"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom::runtime
