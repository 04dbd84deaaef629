// dist::parallelize on one process (a mesh of size one takes the same path and gets the plain
// model back), and FSDP over a parameter an inner strategy already split (2-D: TP inside, FSDP
// outside). The multi-process cases are in tests/dist/mpi/test_fsdp_mpi.cpp.
#include <gtest/gtest.h>

#include "dist_test_util.h"
#include "loom/dist/parallelize.h"

namespace loom::dist {
namespace {

void expect_bit_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  auto x = a.contiguous().to_float_vector(), y = b.contiguous().to_float_vector();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << what << " element " << i;
}

TEST(Parallelize, OneProcessIsThePlainModel) {
  models::BuiltModel plain = models::build_model(testing::dist_tiny_llama());
  models::BuiltModel model = models::build_model(testing::dist_tiny_llama());
  plain.model->materialize(5);
  int memory_policy_calls = 0;
  ParallelizeOptions o;
  o.memory_policy = [&](nn::Module& m) {
    EXPECT_EQ(&m, model.model.get());
    ++memory_policy_calls;
  };
  auto parallel = parallelize(*model.model, DeviceMesh::single(), o);
  EXPECT_EQ(memory_policy_calls, 1);
  EXPECT_EQ(parallel->fsdp(), nullptr);  // nothing to reduce across one rank
  EXPECT_EQ(parallel->backward_scale(), 1.0);
  parallel->materialize(5);
  for (auto& [name, t] : plain.model->state_dict()) expect_bit_equal(model.model->state_dict().at(name), t, name);
  EXPECT_EQ(parallel->replica_factor("decoder.layers.0.mlp.linear_fc1.weight"), 1.0);

  // The step's grads are the plain model's.
  std::map<std::string, Tensor> ref;
  const double ref_loss = testing::reference_step(*plain.model, 25, 2, 5, 0, 1, &ref);
  parallel->zero_grad();
  nn::LMOutput out = model.model->forward(testing::micro_batch(25, 2, 5, 0));
  autograd::backward(out.loss);
  parallel->finish_backward();
  EXPECT_EQ(out.loss.item(), ref_loss);
  for (auto& [name, local] : model.model->local_parameters()) expect_bit_equal(local.grad(), ref.at(name), name);
  parallel->zero_grad();
  for (auto& [name, local] : model.model->local_parameters()) EXPECT_FALSE(local.grad().defined()) << name;
}

TEST(Parallelize, AModelMaterialisedBeforeKeepsItsValues) {
  models::BuiltModel model = models::build_model(testing::dist_tiny_llama());
  model.model->materialize(9);
  auto before = model.model->state_dict();
  std::map<std::string, Tensor> copies;
  for (auto& [n, t] : before) copies[n] = t.clone();
  auto parallel = parallelize(*model.model, DeviceMesh::single(), {});
  parallel->materialize(1);  // a different seed: must not re-initialise
  for (auto& [n, t] : model.model->state_dict()) expect_bit_equal(t, copies.at(n), n);
}

TEST(Parallelize, FsdpShardsTheSliceAnInnerStrategyLeft) {
  // What tensor parallelism does to fc1 on rank 1 of 2 (gate and up halves split like the two
  // tensors they fuse), then FSDP on top: the shard FSDP owns is that slice, and initialisation
  // gives it the one-process numbers at its global positions.
  models::BuiltModel plain = models::build_model(testing::dist_tiny_llama());
  plain.model->materialize(5);
  models::BuiltModel model = models::build_model(testing::dist_tiny_llama());
  const std::string name = "decoder.layers.1.mlp.linear_fc1.weight";
  nn::Parameter& fc1 = *model.model->find_parameter(name);
  ASSERT_EQ(fc1.global_shape, (Shape{44, 18}));  // gate rows 0..21, up rows 22..43
  fc1.placement.add(fc1.global_shape, nn::AxisPlacement::shard("tp", 0, {{11, 11}, {33, 11}}));
  fc1.tensor = Tensor::empty(fc1.local_shape(), fc1.dtype, Device::meta());
  fc1.tensor.set_requires_grad(true);
  auto fsdp = apply_fsdp(*model.model, DeviceMesh::single(), {});
  fsdp->materialize(5);
  EXPECT_EQ(fc1.local().shape(), (Shape{22, 18}));
  ASSERT_NE(fc1.placement.on("fsdp"), nullptr);
  EXPECT_EQ(fc1.placement.axes()[0].axis, "tp");  // inner first
  const Tensor& full = plain.model->find_parameter(name)->tensor;
  expect_bit_equal(fc1.local().narrow(0, 0, 11), full.narrow(0, 11, 11), "gate half");
  expect_bit_equal(fc1.local().narrow(0, 11, 11), full.narrow(0, 33, 11), "up half");
  // A slice no other rank holds counts once in the grad norm.
  EXPECT_EQ(fsdp->mesh().replica_factor(fc1.placement), 1);
}

}  // namespace
}  // namespace loom::dist
