// checkpoint(): keeps only the inputs, recomputes in backward with the RNG replayed, and gives
// grads identical to running without it.
#include <gtest/gtest.h>

#include "loom/autograd/checkpoint.h"
#include "loom/autograd/engine.h"
#include "loom/autograd/saved_tensor.h"
#include "loom/core/allocator.h"
#include "loom/core/rng.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/linear.h"
#include "loom/ops/reduce.h"
#include "testing/gradcheck.h"

using namespace loom;

namespace {

// A small "layer": linear → silu → linear, plus a random perturbation drawn from the default
// generator (stands in for dropout) so the RNG replay matters.
std::vector<Tensor> layer(const std::vector<Tensor>& in, const Tensor& w1, const Tensor& w2) {
  Tensor h = ops::silu(ops::linear(in[0], w1));
  Tensor noise = Tensor::empty(h.shape(), h.dtype());
  normal_(noise, 0.0, 0.1, default_generator());
  h = ops::mul(h, ops::add_scalar(noise, 1.0));
  return {ops::linear(h, w2)};
}

struct Grads {
  std::vector<double> x, w1, w2;
  double loss;
};

Grads run(bool use_checkpoint, autograd::SavePolicy policy = nullptr) {
  manual_seed(123);
  Tensor x = loom::testing::leaf({4, 8}, 1), w1 = loom::testing::leaf({16, 8}, 2), w2 = loom::testing::leaf({8, 16}, 3);
  auto fn = [&](const std::vector<Tensor>& in) { return layer(in, w1, w2); };
  Tensor y = use_checkpoint ? autograd::checkpoint(fn, {x}, policy)[0] : fn({x})[0];
  Tensor loss = ops::sum(ops::square(y));
  // Advance the generator between forward and backward: the recompute must not see this.
  Tensor burn = Tensor::empty({100}, DType::f32);
  normal_(burn, 0, 1, default_generator());
  autograd::backward(loss);
  return {x.grad().to_double_vector(), w1.grad().to_double_vector(), w2.grad().to_double_vector(), loss.item()};
}

}  // namespace

TEST(Checkpoint, GradsIdenticalToNoCheckpoint) {
  Grads plain = run(false), ckpt = run(true);
  EXPECT_EQ(plain.loss, ckpt.loss);
  EXPECT_EQ(plain.x, ckpt.x);
  EXPECT_EQ(plain.w1, ckpt.w1);
  EXPECT_EQ(plain.w2, ckpt.w2);
}

TEST(Checkpoint, PolicyKeepingSomeOpsStillIdentical) {
  Grads plain = run(false);
  Grads keep_linear = run(true, [](const char* op) { return std::string(op) == "linear"; });
  EXPECT_EQ(plain.w1, keep_linear.w1);
  EXPECT_EQ(plain.x, keep_linear.x);
}

TEST(Checkpoint, HoldsOnlyInputsUntilBackward) {
  // Between forward and backward a checkpointed chain keeps far fewer bytes alive.
  auto live_bytes_after_forward = [](bool use_checkpoint) {
    Tensor w = loom::testing::leaf({256, 256}, 4);
    Tensor x = loom::testing::leaf({64, 256}, 5);
    auto fn = [&](const std::vector<Tensor>& in) {
      Tensor h = in[0];
      for (int i = 0; i < 8; ++i) h = ops::silu(ops::linear(h, w));
      return std::vector<Tensor>{h};
    };
    const int64_t before = memory_stats().current_bytes;
    Tensor y = use_checkpoint ? autograd::checkpoint(fn, {x})[0] : fn({x})[0];
    const int64_t held = memory_stats().current_bytes - before;
    autograd::backward(ops::sum(y));
    return held;
  };
  const int64_t plain = live_bytes_after_forward(false), ckpt = live_bytes_after_forward(true);
  // Plain keeps 8 layers × (linear input + silu input) of 64×256 f64; checkpoint keeps the output.
  EXPECT_GT(plain, 8 * 2 * 64 * 256 * 8 - 1);
  EXPECT_LT(ckpt, plain / 4) << "plain " << plain << " checkpoint " << ckpt;
}

TEST(Checkpoint, SavedTensorHooksSeeEverySave) {
  struct CountingHooks : autograd::SavedTensorHooks {
    int packs = 0, unpacks = 0;
    std::shared_ptr<void> pack(const Tensor& t, const char*) override {
      ++packs;
      return std::make_shared<Tensor>(t);
    }
    Tensor unpack(const std::shared_ptr<void>& p) override {
      ++unpacks;
      return *static_cast<Tensor*>(p.get());
    }
  };
  auto hooks = std::make_shared<CountingHooks>();
  Tensor a = loom::testing::leaf({3}, 6), b = loom::testing::leaf({3}, 7);
  Tensor y;
  {
    autograd::SavedTensorHooksGuard guard(hooks);
    y = ops::sum(ops::mul(a, b));  // mul saves a and b
  }
  EXPECT_EQ(hooks->packs, 2);
  autograd::backward(y);
  EXPECT_EQ(hooks->unpacks, 2);
  EXPECT_EQ(a.grad().to_double_vector(), b.to_double_vector());
}

TEST(Checkpoint, RecomputeIsVisibleToSideEffects) {
  int forwards = 0, recomputes = 0;
  Tensor x = loom::testing::leaf({3}, 8);
  auto fn = [&](const std::vector<Tensor>& in) {
    if (autograd::is_recomputing()) ++recomputes; else ++forwards;
    return std::vector<Tensor>{ops::mul(in[0], in[0])};
  };
  Tensor y = autograd::checkpoint(fn, {x})[0];
  EXPECT_FALSE(autograd::is_recomputing());
  autograd::backward(ops::sum(y));
  EXPECT_EQ(forwards, 1);
  EXPECT_EQ(recomputes, 1);
}

// Training statistics are recorded by a training forward only: not when it is recomputed, not
// under an EvaluationGuard (which also records no history), and again once the guard ends; a
// plain NoGradGuard (weight init, tests) still records them.
TEST(Checkpoint, EvaluationRecordsNoTrainingStatistics) {
  EXPECT_TRUE(autograd::records_training_statistics());
  {
    autograd::NoGradGuard no_grad;
    EXPECT_TRUE(autograd::records_training_statistics());
  }
  {
    autograd::EvaluationGuard evaluating;
    EXPECT_TRUE(autograd::is_evaluating());
    EXPECT_FALSE(autograd::grad_enabled());
    EXPECT_FALSE(autograd::records_training_statistics());
    {
      autograd::EvaluationGuard nested;
      EXPECT_FALSE(autograd::records_training_statistics());
    }
    EXPECT_TRUE(autograd::is_evaluating());
  }
  EXPECT_FALSE(autograd::is_evaluating());
  EXPECT_TRUE(autograd::grad_enabled());
  bool during_recompute = true;
  Tensor x = loom::testing::leaf({3}, 9);
  Tensor y = autograd::checkpoint(
      [&](const std::vector<Tensor>& in) {
        if (autograd::is_recomputing()) during_recompute = autograd::records_training_statistics();
        return std::vector<Tensor>{ops::mul(in[0], in[0])};
      },
      {x})[0];
  autograd::backward(ops::sum(y));
  EXPECT_FALSE(during_recompute);
}
