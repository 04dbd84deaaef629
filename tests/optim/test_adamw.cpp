// AdamW: the update of MindFormers' pynative adamw.py against plain double loops, master weights,
// option parsing and validation of spec training_hyperparameters.md §1.1.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/core/error.h"
#include "loom/optim/adamw.h"
#include "loom/optim/optimizer_factory.h"
#include "optim_test_util.h"

using namespace loom;
using namespace loom::optim;
using namespace loom::optim::testing;

namespace {

struct DoubleAdam {
  std::vector<double> p, m, v;
  void step(const std::vector<float>& g, double lr, double wd, double b1, double b2, double eps,
            int t) {
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * double(g[i]) * g[i];
      p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i] / bc2) + eps);
    }
  }
};

}  // namespace

// adamw.py: decoupled WD on the pre-update weight, bias corrections with t after increment.
TEST(AdamW, ThreeStepsMatchDoubleLoops) {
  std::vector<float> w0 = {0.5f, -1.25f, 2.0f, 0.0f, 3.5f, -0.75f};
  Tensor w = make_param(w0, {2, 3});
  AdamWOptions o;
  o.betas = {0.9, 0.95};
  o.eps = 1e-8;
  o.weight_decay = 0.1;
  AdamW opt({{"decoder.layers.0.mlp.linear_fc1.weight", w}}, o);
  DoubleAdam ref{{w0.begin(), w0.end()}, std::vector<double>(6), std::vector<double>(6)};
  const std::vector<std::vector<float>> grads = {
      {0.1f, -0.2f, 0.3f, 0.0f, 1.5f, -0.01f},
      {-0.3f, 0.2f, 0.25f, 0.5f, -1.0f, 0.02f},
      {0.05f, 0.05f, -0.4f, -0.5f, 0.7f, 0.0f}};
  const double lrs[] = {1e-2, 2e-2, 5e-3};
  for (int t = 1; t <= 3; ++t) {
    set_grad(w, grads[t - 1]);
    EXPECT_DOUBLE_EQ(opt.step_with_lr(lrs[t - 1]), lrs[t - 1]);
    ref.step(grads[t - 1], lrs[t - 1], 0.1, 0.9, 0.95, 1e-8, t);
  }
  EXPECT_EQ(opt.global_step(), 3);
  std::vector<float> got = w.to_float_vector();
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(got[i], ref.p[i], 2e-6 * std::max(1.0, std::abs(ref.p[i]))) << i;
  auto st = opt.state_dict();
  std::vector<float> m = st.at("adam_m.decoder.layers.0.mlp.linear_fc1.weight").to_float_vector();
  std::vector<float> v = st.at("adam_v.decoder.layers.0.mlp.linear_fc1.weight").to_float_vector();
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(m[i], ref.m[i], 1e-7) << i;
    EXPECT_NEAR(v[i], ref.v[i], 1e-7) << i;
  }
}

// The first update at t=1 with zero state: m/bc1 = g and sqrt(v/bc2) = |g|, so the step is
// lr·sign(g)·|g|/(|g|+eps) — a closed form checked to fp32 precision.
TEST(AdamW, FirstStepIsSignedLearningRate) {
  Tensor w = make_param({1.f, 1.f, 1.f}, {3});
  AdamWOptions o;
  o.weight_decay = 0.0;
  AdamW opt({{"w", w}}, o);
  set_grad(w, {0.5f, -2.f, 0.f});
  opt.step_with_lr(0.1);
  std::vector<float> got = w.to_float_vector();
  EXPECT_NEAR(got[0], 0.9f, 1e-6);
  EXPECT_NEAR(got[1], 1.1f, 1e-6);
  EXPECT_FLOAT_EQ(got[2], 1.f);
}

// spec §1 (fp32 master for bf16 params): the master follows the fp32 trajectory and the model
// param is its round-to-nearest-even bf16 copy.
TEST(AdamW, Bf16ParamsKeepFp32Master) {
  std::vector<float> w0 = random_bf16_values(1000, 7);
  Tensor w = make_param(w0, {10, 100}, DType::bf16);
  AdamWOptions o;
  o.weight_decay = 0.01;
  AdamW opt({{"decoder.layers.0.self_attention.linear_proj.weight", w}}, o);
  DoubleAdam ref{{w0.begin(), w0.end()}, std::vector<double>(1000), std::vector<double>(1000)};
  for (int t = 1; t <= 4; ++t) {
    std::vector<float> g = random_values(1000, 100 + t, 0.1f);
    set_grad(w, g);
    opt.step_with_lr(1e-3);
    ref.step(g, 1e-3, 0.01, 0.9, 0.95, 1e-8, t);
  }
  auto st = opt.state_dict();
  Tensor master = st.at("main_param.decoder.layers.0.self_attention.linear_proj.weight");
  EXPECT_EQ(master.dtype(), DType::f32);
  std::vector<float> mv = master.to_float_vector();
  std::vector<float> pv = w.to_float_vector();
  for (int i = 0; i < 1000; ++i) {
    EXPECT_NEAR(mv[i], ref.p[i], 2e-6 * std::max(1.0, std::abs(ref.p[i]))) << i;
    EXPECT_EQ(pv[i], round_to_bf16(mv[i])) << i;
  }
  // Updates smaller than half a bf16 ulp still accumulate in the master.
  EXPECT_NE(mv, std::vector<float>(w0.begin(), w0.end()));
}

TEST(AdamW, F16ParamsRoundFromMaster) {
  Tensor w = make_param({0.1f, 0.2f, 0.3f, 0.4f}, {4}, DType::f16);
  AdamW opt({{"w", w}}, AdamWOptions{});
  set_grad(w, {1.f, -1.f, 0.5f, 0.f});
  opt.step_with_lr(1e-2);
  std::vector<float> mv = opt.state_dict().at("main_param.w").to_float_vector();
  std::vector<float> pv = w.to_float_vector();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(pv[i], round_to_f16(mv[i]));
}

// Parameters without a grad are skipped (no decay either); the step counter still advances.
TEST(AdamW, ParamsWithoutGradAreSkipped) {
  Tensor a = make_param({1.f, 2.f}, {1, 2});
  Tensor b = make_param({3.f, 4.f}, {1, 2});
  AdamWOptions o;
  o.weight_decay = 0.5;
  AdamW opt({{"a.weight", a}, {"b.weight", b}}, o);
  set_grad(a, {1.f, 1.f});
  opt.step_with_lr(0.1);
  EXPECT_EQ(b.to_float_vector(), (std::vector<float>{3.f, 4.f}));
  EXPECT_NE(a.to_float_vector(), (std::vector<float>{1.f, 2.f}));
  EXPECT_EQ(opt.global_step(), 1);
}

// Frozen parameters (requires_grad false) are not optimised at all.
TEST(AdamW, FrozenParamsAreNotOptimised) {
  Tensor a = make_param({1.f}, {1});
  Tensor frozen = Tensor::from_vector(std::vector<float>{2.f}, {1});
  AdamW opt({{"a", a}, {"frozen", frozen}}, AdamWOptions{});
  EXPECT_EQ(opt.param_states().size(), 1u);
  EXPECT_EQ(opt.state_dict().count("adam_m.frozen"), 0u);
}

// adamw.py: lr = schedule(global_step before the increment): the first update uses lr(0).
TEST(AdamW, StepUsesScheduleBeforeIncrement) {
  Tensor w = make_param({1.f}, {1});
  AdamW opt({{"w", w}}, AdamWOptions{});
  auto sched = build_lr_scheduler(yaml_like(R"({"type": "LinearWithWarmUpLR", "learning_rate": 0.1,
                                               "warmup_steps": 4})"), 10);
  opt.set_lr_scheduler(std::move(sched));
  set_grad(w, {1.f});
  EXPECT_DOUBLE_EQ(opt.step(), 0.0);
  EXPECT_NEAR(opt.step(), 0.025, 1e-9);
  EXPECT_NEAR(opt.lr_at(opt.global_step()), 0.05, 1e-9);
}

TEST(AdamW, QuadraticToyConverges) {
  const int n = 64;
  std::vector<float> target = random_values(n, 3);
  Tensor w = make_param(std::vector<float>(n, 0.f), {8, 8});
  AdamWOptions o;
  o.weight_decay = 0.0;
  AdamW opt({{"toy.weight", w}}, o);
  opt.set_lr_scheduler(build_lr_scheduler(
      yaml_like(R"({"type": "cosine", "learning_rate": 0.1, "warmup_steps": 10})"), 400));
  auto loss = [&] {
    double l = 0;
    std::vector<float> x = w.to_float_vector();
    for (int i = 0; i < n; ++i) l += 0.5 * (x[i] - target[i]) * (x[i] - target[i]);
    return l;
  };
  const double initial = loss();
  for (int s = 0; s < 400; ++s) {
    std::vector<float> x = w.to_float_vector(), g(n);
    for (int i = 0; i < n; ++i) g[i] = x[i] - target[i];
    set_grad(w, g);
    opt.step();
  }
  EXPECT_LT(loss(), initial * 1e-4);
}

// spec §1.1 field table and the YAML example.
TEST(AdamWOptions, ParsesSpecExample) {
  AdamWOptions o = AdamWOptions::from_json(yaml_like(R"({"type": "AdamW", "betas": [0.9, 0.95],
      "eps": 1e-8, "weight_decay": 0.1, "weight_decay_exclude": ["*norm*", "*bias*"]})"));
  EXPECT_DOUBLE_EQ(o.betas[0], 0.9);
  EXPECT_DOUBLE_EQ(o.betas[1], 0.95);
  EXPECT_DOUBLE_EQ(o.eps, 1e-8);
  EXPECT_DOUBLE_EQ(o.weight_decay, 0.1);
  EXPECT_EQ(o.weight_decay_exclude, (std::vector<std::string>{"*norm*", "*bias*"}));
  AdamWOptions d = AdamWOptions::from_json(yaml_like(R"({"type": "AdamW"})"));
  EXPECT_DOUBLE_EQ(d.betas[1], 0.95);
  EXPECT_DOUBLE_EQ(d.weight_decay, 0.01);
}

// QUIRK fixed (docs/optimizers.md): an integer `weight_decay: 0` is a valid float.
TEST(AdamWOptions, IntegerWeightDecayAccepted) {
  AdamWOptions o = AdamWOptions::from_json(yaml_like(R"({"type": "AdamW", "weight_decay": 0})"));
  EXPECT_DOUBLE_EQ(o.weight_decay, 0.0);
  AdamWOptions b = AdamWOptions::from_json(yaml_like(R"({"betas": [0, 0.5], "eps": 1})"));
  EXPECT_DOUBLE_EQ(b.betas[0], 0.0);
  EXPECT_DOUBLE_EQ(b.eps, 1.0);
}

static std::string config_error(const std::string& text) {
  try {
    AdamWOptions::from_json(yaml_like(text));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

// spec §1.1: betas length 2 in [0, 1), eps > 0, weight_decay >= 0.
TEST(AdamWOptions, ValidationErrorsNameTheField) {
  EXPECT_NE(config_error(R"({"betas": [0.9]})").find("optimizer.betas: must hold exactly 2 values [beta1, beta2], got 1"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"betas": [0.9, 1.0]})").find("optimizer.betas[1]: must be in [0, 1), got 1.0"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"betas": [-0.1, 0.9]})").find("optimizer.betas[0]"), std::string::npos);
  EXPECT_NE(config_error(R"({"betas": ["a", 0.9]})").find("optimizer.betas[0]: expected float, got str 'a'"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"eps": 0})").find("optimizer.eps: must be > 0, got 0.0"), std::string::npos);
  EXPECT_NE(config_error(R"({"weight_decay": -0.1})").find("optimizer.weight_decay: must be >= 0"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"weight_decay": "0.1"})").find("optimizer.weight_decay: expected float, got str '0.1'"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"weight_decay_exclude": [1]})").find("optimizer.weight_decay_exclude"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"enable_cpu_offload": true})").find("optimizer.enable_cpu_offload"),
            std::string::npos);
}

// Unknown extras are warned about (listing them) and ignored.
TEST(AdamWOptions, UnknownExtrasWarnAndAreIgnored) {
  OptionProblems problems;
  OptionReader reader(yaml_like(R"({"type": "AdamW", "use_fused": true, "foo": 1, "momentum": 0.9})"), "optimizer",
                      problems);
  AdamWOptions o = AdamWOptions::read(reader);
  EXPECT_EQ(problems.warnings(), (std::vector<std::string>{"optimizer.foo: is not a parameter of AdamW and is ignored",
                                                           "optimizer.momentum: is not a parameter of AdamW and is "
                                                           "ignored"}));
  EXPECT_DOUBLE_EQ(o.weight_decay, 0.01);
}

TEST(OptimizerFactory, BuildsByTypeAndRejectsUnknown) {
  Tensor w = make_param({1.f, 2.f}, {1, 2});
  auto opt = build_optimizer(yaml_like(R"({"type": "AdamW", "weight_decay": 0.0})"), {{"w", w}});
  EXPECT_EQ(opt->type(), "AdamW");
  // The names are exact (spec training_hyperparameters.md §1.1 `type`), as check-config says.
  try {
    build_optimizer(yaml_like(R"({"type": "adamw"})"), {{"w", w}});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "optimizer.type: must be 'AdamW' or 'Muon', got 'adamw'; did you mean 'AdamW'?");
  }
  try {
    build_optimizer(yaml_like(R"({"type": "SGD"})"), {{"w", w}});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer.type: must be 'AdamW' or 'Muon', got 'SGD'"),
              std::string::npos);
  }
}

TEST(AdamW, RejectsUnsupportedParamDtype) {
  Tensor w = make_param({1.f}, {1}, DType::f64);
  EXPECT_THROW(AdamW({{"w", w}}, AdamWOptions{}), DTypeError);
}

TEST(Optimizer, ZeroGradKeepsBuffersAndNamedParamsListsOptimised) {
  Tensor a = make_param({1.f, 2.f}, {2});
  AdamW opt({{"a", a}}, AdamWOptions{});
  set_grad(a, {3.f, 4.f});
  const void* buffer = a.grad().raw_data();
  opt.zero_grad();
  EXPECT_EQ(a.grad().to_float_vector(), (std::vector<float>{0.f, 0.f}));
  EXPECT_EQ(a.grad().raw_data(), buffer);
  NamedParams np = opt.named_params();
  ASSERT_EQ(np.size(), 1u);
  EXPECT_EQ(np[0].name, "a");
  EXPECT_TRUE(np[0].param.shares_storage_with(a));
}
