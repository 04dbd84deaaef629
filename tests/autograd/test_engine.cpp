// Autograd engine cases: shared inputs, diamonds, no-grad, hooks, non-leaf grads, the long chain,
// main grads for bf16 leaves.
#include <gtest/gtest.h>
#include <gtest/gtest-spi.h>

#include "loom/autograd/engine.h"
#include "loom/autograd/function.h"
#include "loom/autograd/grad_mode.h"
#include "loom/kernels/cpu/elementwise.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/linear.h"
#include "loom/ops/reduce.h"
#include "testing/gradcheck.h"

using namespace loom;

namespace {
Tensor scalar_leaf(double v, DType dt = DType::f64) {
  Tensor t = Tensor::full({1}, v, dt);
  t.set_requires_grad(true);
  return t;
}
}  // namespace

TEST(AutogradEngine, SharedInputAccumulates) {
  Tensor x = scalar_leaf(3.0);
  Tensor y = ops::mul(x, x);  // dy/dx = 2x
  autograd::backward(ops::sum(y));
  EXPECT_DOUBLE_EQ(x.grad().item(), 6.0);
}

TEST(AutogradEngine, DiamondSumsBothPaths) {
  Tensor x = scalar_leaf(2.0);
  Tensor a = ops::scale(x, 3.0), b = ops::exp(x);
  Tensor y = ops::mul(a, b);  // y = 3x e^x → dy/dx = 3e^x + 3x e^x
  autograd::backward(ops::sum(y));
  EXPECT_NEAR(x.grad().item(), 3 * std::exp(2.0) * 3.0, 1e-12);
}

TEST(AutogradEngine, GradsAccumulateAcrossBackwardCalls) {
  Tensor x = scalar_leaf(1.0);
  autograd::backward(ops::sum(ops::scale(x, 2.0)));
  autograd::backward(ops::sum(ops::scale(x, 5.0)));
  EXPECT_DOUBLE_EQ(x.grad().item(), 7.0);
}

TEST(AutogradEngine, NoGradRecordsNothing) {
  Tensor x = scalar_leaf(1.0);
  Tensor y;
  {
    autograd::NoGradGuard guard;
    y = ops::scale(x, 2.0);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_THROW(autograd::backward(ops::sum(y)), AutogradError);
}

TEST(AutogradEngine, NonScalarRootNeedsGrad) {
  Tensor x = loom::testing::leaf({2}, 1);
  Tensor y = ops::scale(x, 2.0);
  EXPECT_THROW(autograd::backward(y), AutogradError);
  autograd::backward(y, Tensor::ones({2}, DType::f64));
  EXPECT_EQ(x.grad().to_double_vector(), (std::vector<double>{2.0, 2.0}));
}

TEST(AutogradEngine, PostAccumulateHookRunsAfterEachLeafAccumulates) {
  Tensor w1 = scalar_leaf(1.0), w2 = scalar_leaf(2.0);
  std::vector<std::string> order;
  autograd::register_post_accumulate_hook(w1, [&](Tensor& p) { order.push_back("w1=" + std::to_string(p.grad().item())); });
  autograd::register_post_accumulate_hook(w2, [&](Tensor& p) { order.push_back("w2=" + std::to_string(p.grad().item())); });
  // y = (x·w1)·w2 : w2's node is newer, so its grad is ready first (reverse of forward).
  Tensor x = Tensor::full({1}, 3.0, DType::f64);
  Tensor y = ops::mul(ops::mul(x, w1), w2);
  autograd::backward(ops::sum(y));
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], "w2=3.000000");
  EXPECT_EQ(order[1], "w1=6.000000");
}

TEST(AutogradEngine, GradHooksTransformEachContributionBeforeItAccumulates) {
  // Two backward passes (micro-batches): each one's grad goes through the hooks (in order) on its
  // own and is then added to what is there; the post-accumulate hook sees the sum. (Uses of w
  // within one backward reach its accumulator already summed.)
  Tensor w = scalar_leaf(1.0);
  std::vector<double> seen;
  autograd::register_grad_hook(w, [&](const Tensor& g) {
    seen.push_back(g.item());
    return ops::scale(g, 10.0);
  });
  autograd::register_grad_hook(w, [](const Tensor& g) { return ops::add_scalar(g, 1.0); });
  double accumulated = 0;
  autograd::register_post_accumulate_hook(w, [&](Tensor& p) { accumulated = p.grad().item(); });
  Tensor x = Tensor::full({1}, 3.0, DType::f64), z = Tensor::full({1}, 5.0, DType::f64);
  autograd::backward(ops::sum(ops::mul(x, w)));
  autograd::backward(ops::sum(ops::add(ops::mul(z, w), ops::mul(z, w))));
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_DOUBLE_EQ(seen[0], 3.0);
  EXPECT_DOUBLE_EQ(seen[1], 10.0);
  EXPECT_DOUBLE_EQ(w.grad().item(), (3.0 * 10 + 1) + (10.0 * 10 + 1));
  EXPECT_DOUBLE_EQ(accumulated, w.grad().item());
}

TEST(AutogradEngine, NonLeafGradOnRequest) {
  Tensor x = scalar_leaf(2.0);
  Tensor h = ops::scale(x, 3.0);
  autograd::retain_grad(h);
  autograd::backward(ops::sum(ops::mul(h, h)));  // d/dh h² = 2h = 12
  EXPECT_DOUBLE_EQ(h.grad().item(), 12.0);
  Tensor x2 = scalar_leaf(2.0);
  Tensor h2 = ops::scale(x2, 3.0);
  Tensor out = ops::sum(ops::mul(h2, h2));
  auto grads = autograd::grad({out}, {h2, x2});
  EXPECT_DOUBLE_EQ(grads[0].item(), 12.0);
  EXPECT_DOUBLE_EQ(grads[1].item(), 36.0);
  EXPECT_FALSE(x2.grad().defined()) << "grad() must not touch .grad()";
}

TEST(AutogradEngine, LongChainDoesNotOverflowTheStack) {
  // 100,000 ops deep: a recursive engine would blow the stack.
  Tensor x = scalar_leaf(1.0);
  Tensor y = x;
  for (int i = 0; i < 100000; ++i) y = ops::add_scalar(y, 1e-6);
  autograd::backward(ops::sum(y));
  EXPECT_DOUBLE_EQ(x.grad().item(), 1.0);
  EXPECT_NEAR(y.item(), 1.1, 1e-9);
}

TEST(AutogradEngine, Bf16LeafGetsFp32MainGrad) {
  // A bf16 weight's grad accumulates in fp32, and linear's weight-grad GEMM hands it over
  // unrounded: 1 + 2^-10 is not representable in bf16 but survives in the main grad.
  Tensor w = Tensor::full({1, 2}, 1.0, DType::bf16);
  w.set_requires_grad(true);
  Tensor x = Tensor::from_vector(std::vector<float>{1.0f, 1.0f / 1024, 1.0f, 0.0f}, {2, 2}, DType::bf16);
  Tensor y = ops::linear(x, w);  // [2, 1]
  autograd::backward(y, Tensor::ones({2, 1}, DType::bf16));
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_FLOAT_EQ(static_cast<float>(w.grad().at({0, 0})), 2.0f);
  EXPECT_FLOAT_EQ(static_cast<float>(w.grad().at({0, 1})), 1.0f / 1024);
  // and a second micro-batch accumulates in fp32 too
  Tensor y2 = ops::linear(Tensor::from_vector(std::vector<float>{1.0f / 256, 1.0f}, {1, 2}, DType::bf16), w);
  autograd::backward(y2, Tensor::ones({1, 1}, DType::bf16));
  EXPECT_FLOAT_EQ(static_cast<float>(w.grad().at({0, 0})), 2.0f + 1.0f / 256);
}

TEST(AutogradEngine, BackwardTwiceWithoutRetainGraphFails) {
  Tensor x = scalar_leaf(2.0);
  Tensor y = ops::sum(ops::mul(x, x));
  autograd::backward(y);
  EXPECT_THROW(autograd::backward(y), AutogradError);
  Tensor z = ops::sum(ops::mul(x, x));
  autograd::backward(z, Tensor(), /*retain_graph=*/true);
  autograd::backward(z);
  EXPECT_DOUBLE_EQ(x.grad().item(), 4.0 + 4.0 + 4.0);
}

namespace {
// d/dx x² is 2x; this op claims x, so the finite-difference checker must flag it.
Tensor wrong_square(const Tensor& x) {
  namespace k = kernels::cpu;
  Tensor out = k::unary(k::UnaryOp::square, x, "wrong_square");
  autograd::record("wrong_square", {&x}, {&out}, {x},
                   [](const std::vector<Tensor>& g, const autograd::BackwardContext& ctx) -> std::vector<Tensor> {
                     return {k::binary(k::BinaryOp::mul, g[0], ctx.saved(0), "wrong_square")};
                   });
  return out;
}
}  // namespace

TEST(AutogradEngine, GradcheckDetectsAWrongBackward) {
  Tensor x = loom::testing::leaf({3}, 2, 0.5, 1.5);
  EXPECT_NONFATAL_FAILURE(
      loom::testing::gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{wrong_square(in[0])}; }, {x}),
      "analytic");
}
