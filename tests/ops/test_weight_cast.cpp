// cast_weight: one conversion per weight while a WeightCastScope is open, the same values and
// gradients as ops::cast, and never a stale copy once the scope closes or the storage changes.
#include <gtest/gtest.h>

#include "loom/autograd/engine.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/linear.h"
#include "loom/ops/reduce.h"
#include "loom/ops/weight_cast.h"
#include "testing/gradcheck.h"

using namespace loom;
using loom::testing::random_f64;

namespace {

// loss = Σ linear(x, bf16(w)) over two uses of the weight (two micro-batches, or a recompute).
Tensor two_uses(const Tensor& w, const Tensor& x1, const Tensor& x2, bool cached) {
  auto use = [&](const Tensor& x) {
    Tensor wc = cached ? ops::cast_weight(w, DType::bf16) : ops::cast(w, DType::bf16);
    return ops::sum(ops::cast(ops::linear(x, wc), DType::f32), {0, 1}, false);
  };
  return ops::add(use(x1), use(x2));
}

}  // namespace

TEST(OpsWeightCast, OneConversionPerScopeWithTheGradientsOfPlainCasts) {
  Tensor w = random_f64({6, 5}, 1).to(DType::f32);
  Tensor x1 = random_f64({4, 5}, 2).to(DType::bf16), x2 = random_f64({3, 5}, 3).to(DType::bf16);
  Tensor w_ref = w.detach().clone();
  w.set_requires_grad(true);
  w_ref.set_requires_grad(true);

  const int64_t before = ops::weight_casts_made();
  Tensor loss;
  {
    ops::WeightCastScope scope;
    loss = two_uses(w, x1, x2, true);
    EXPECT_EQ(ops::weight_casts_made() - before, 1);  // the second use reused the copy
    autograd::backward(loss);
  }
  Tensor loss_ref = two_uses(w_ref, x1, x2, false);
  autograd::backward(loss_ref);
  EXPECT_EQ(loss.item(), loss_ref.item());
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_EQ(w.grad().to_double_vector(), w_ref.grad().to_double_vector());  // both uses reach the fp32 weight
}

TEST(OpsWeightCast, OutsideAScopeEveryUseConverts) {
  Tensor w = random_f64({4, 4}, 4).to(DType::f32);
  const int64_t before = ops::weight_casts_made();
  ops::cast_weight(w, DType::bf16);
  ops::cast_weight(w, DType::bf16);
  EXPECT_EQ(ops::weight_casts_made() - before, 2);
  EXPECT_EQ(ops::cast_weight(w, DType::f32).storage(), w.storage());  // no cast at all
}

TEST(OpsWeightCast, AClosedScopeForgetsSoUpdatedWeightsAreConvertedAgain) {
  Tensor w = Tensor::full({2, 2}, 1.0, DType::f32);
  {
    ops::WeightCastScope scope;
    EXPECT_EQ(ops::cast_weight(w, DType::bf16).to_double_vector(), std::vector<double>(4, 1.0));
  }
  w.fill_(2.0);  // the optimizer step, between scopes
  ops::WeightCastScope scope;
  EXPECT_EQ(ops::cast_weight(w, DType::bf16).to_double_vector(), std::vector<double>(4, 2.0));
}

TEST(OpsWeightCast, ANewStorageIsNeverServedAnOldCopy) {
  ops::WeightCastScope scope;
  for (double v : {1.0, 2.0, 3.0}) {
    // FSDP gathers a unit into a fresh buffer each time (often at the address just freed).
    Tensor gathered = Tensor::full({8, 8}, v, DType::f32);
    EXPECT_EQ(ops::cast_weight(gathered, DType::bf16).to_double_vector(), std::vector<double>(64, v));
  }
  // Views of one storage at other offsets or shapes are other weights.
  Tensor flat = Tensor::arange(8, DType::f32);
  EXPECT_EQ(ops::cast_weight(flat.narrow(0, 0, 4), DType::bf16).to_double_vector(), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(ops::cast_weight(flat.narrow(0, 4, 4), DType::bf16).to_double_vector(), (std::vector<double>{4, 5, 6, 7}));
}
