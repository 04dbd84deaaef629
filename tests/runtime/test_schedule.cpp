// The plain schedule (loom/runtime/schedule.h): one optimizer step's A micro-batches give the
// grads and loss of forward + backward(loss / A) each, from zeroed grads, and the step's token
// counts.
#include <gtest/gtest.h>

#include "loom/autograd/engine.h"
#include "loom/dist/parallelize.h"
#include "loom/models/registry.h"
#include "loom/ops/elementwise.h"
#include "loom/runtime/causal_lm_model.h"
#include "loom/runtime/schedule.h"

namespace loom::runtime {
namespace {

using Json = nlohmann::ordered_json;

Json tiny_llama() {
  return Json{{"model_type", "llama"},  {"vocab_size", 19},        {"hidden_size", 12},  {"num_layers", 2},
              {"num_attention_heads", 2}, {"num_query_groups", 1}, {"ffn_hidden_size", 20},
              {"compute_dtype", "float32"}};
}

data::Batch batch(int64_t index) {
  data::Batch b;
  std::vector<int32_t> ids, labels;
  std::vector<float> mask;
  for (int64_t i = 0; i < 2 * 6; ++i) {
    ids.push_back(static_cast<int32_t>((index * 5 + i * 3) % 19));
    labels.push_back(static_cast<int32_t>((index * 7 + i * 2 + 1) % 19));
    mask.push_back(i % 5 == 4 ? 0.f : 1.f);
  }
  b.input_ids = Tensor::from_vector(ids, {2, 6});
  b.labels = Tensor::from_vector(labels, {2, 6});
  b.loss_mask = Tensor::from_vector(mask, {2, 6});
  b.epoch = index / 2;
  return b;
}

std::unique_ptr<CausalLMModel> tiny_model() {
  models::BuiltModel built = models::build_model(tiny_llama());
  built.model->materialize(3);
  return std::make_unique<CausalLMModel>(std::move(built.args), std::move(built.model));
}

TEST(PlainSchedule, AccumulatesTheStepsMicroBatchesFromZeroedGrads) {
  const int64_t A = 3;
  auto reference = tiny_model();
  double ref_loss = 0;
  for (int64_t i = 0; i < A; ++i) {
    ForwardResult r = reference->forward(batch(i), {/*head_grads_in_forward=*/true});
    autograd::backward(ops::scale(r.loss, 1.0 / A));
    ref_loss += r.loss.item() / A;
  }

  auto model = tiny_model();
  auto parallel = dist::parallelize(model->module(), dist::DeviceMesh::single(), {});
  // Grads left from an earlier step must not leak into this one.
  for (auto& [name, local] : model->module().local_parameters()) local.set_grad(Tensor::ones(local.shape()));
  PlainSchedule schedule(*model, *parallel, A);
  int64_t next = 0;
  const StepResult r = schedule.run([&] { return batch(next++); }, Mode::train);
  EXPECT_EQ(next, A);
  EXPECT_EQ(r.micro_batches, A);
  EXPECT_EQ(r.loss, ref_loss);
  EXPECT_EQ(r.tokens, A * 12);
  EXPECT_EQ(r.loss_tokens, A * 10);  // two masked positions per micro-batch
  EXPECT_EQ(r.epoch, 1);             // the last batch's
  auto ref_params = reference->module().local_parameters();
  auto params = model->module().local_parameters();
  ASSERT_EQ(params.size(), ref_params.size());
  for (size_t k = 0; k < params.size(); ++k) {
    auto a = params[k].second.grad().to_float_vector(), b = ref_params[k].second.grad().to_float_vector();
    ASSERT_EQ(a, b) << params[k].first;
  }
  EXPECT_EQ(micro_batch_backward_scale(*parallel, A), 1.0 / A);
}

TEST(PlainSchedule, NeedsAtLeastOneMicroBatch) {
  auto model = tiny_model();
  auto parallel = dist::parallelize(model->module(), dist::DeviceMesh::single(), {});
  EXPECT_THROW(PlainSchedule(*model, *parallel, 0), ValueError);
}

}  // namespace
}  // namespace loom::runtime
