// LR schedulers (MindFormers' lr_schedule.py; spec training_hyperparameters.md §2): closed forms at
// several steps, the docstring check values, the fixed QUIRKs, and the config errors.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "loom/core/error.h"
#include "loom/optim/lr_scheduler.h"
#include "loom/optim/option_reader.h"
#include "optim_test_util.h"

using namespace loom;
using namespace loom::optim;
using namespace loom::optim::testing;

namespace {

constexpr double kPi = std::numbers::pi;

std::unique_ptr<LrScheduler> sched(const std::string& text, int64_t total = 20) {
  return build_lr_scheduler(yaml_like(text), total);
}

// fp32 results against double closed forms: a few fp32 ulps.
void expect_lr(const LrScheduler& s, int64_t t, double expected) {
  EXPECT_NEAR(s.lr_at(t), expected, 4e-7 * std::abs(expected) + 1e-12) << s.type() << " t=" << t;
}

std::string config_error(const std::string& text, int64_t total = 20) {
  try {
    build_lr_scheduler(yaml_like(text), total);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

// Check values of lr_schedule.py's docstrings: L=0.005, W=10, T=20.
TEST(LrScheduler, DocstringCheckValues) {
  auto c = sched(R"({"type": "ConstantWarmUpLR", "learning_rate": 0.005, "warmup_steps": 10})");
  EXPECT_FLOAT_EQ(static_cast<float>(c->lr_at(1)), 5e-4f);
  EXPECT_FLOAT_EQ(static_cast<float>(c->lr_at(15)), 5e-3f);
  auto l = sched(R"({"type": "LinearWithWarmUpLR", "learning_rate": 0.005, "warmup_steps": 10})");
  EXPECT_FLOAT_EQ(static_cast<float>(l->lr_at(15)), 2.5e-3f);
  auto cos = sched(R"({"type": "CosineWithWarmUpLR", "learning_rate": 0.005, "warmup_steps": 10})");
  EXPECT_FLOAT_EQ(static_cast<float>(cos->lr_at(15)), 2.4999997e-3f);
  auto ann = sched(R"({"type": "CosineAnnealingLR", "base_lr": 0.005, "t_max": 10, "eta_min": 1e-7})");
  EXPECT_FLOAT_EQ(static_cast<float>(ann->lr_at(1)), 4.8776437e-3f);
  EXPECT_FLOAT_EQ(static_cast<float>(ann->lr_at(15)), 2.5000498e-3f);
}

// Warmup branch everywhere: L0 + (L - L0)·t/W for t < W.
TEST(LrScheduler, ConstantWarmUpClosedForm) {
  auto s = sched(R"({"type": "ConstantWarmUpLR", "learning_rate": 0.01, "warmup_steps": 4,
                     "warmup_lr_init": 0.002})");
  for (int t : {0, 1, 3}) expect_lr(*s, t, 0.002 + 0.008 * t / 4.0);
  for (int t : {4, 10, 100}) expect_lr(*s, t, 0.01);
  auto no_warmup = sched(R"({"type": "ConstantWarmUpLR", "learning_rate": 0.01, "warmup_steps": 0})");
  expect_lr(*no_warmup, 0, 0.01);
}

TEST(LrScheduler, LinearClosedForm) {
  auto s = sched(R"({"type": "linear", "learning_rate": 0.01, "warmup_steps": 5})", 25);
  EXPECT_EQ(s->type(), "LinearWithWarmUpLR");
  for (int t : {0, 2, 4}) expect_lr(*s, t, 0.01 * t / 5.0);
  for (int t : {5, 12, 24, 25, 30}) expect_lr(*s, t, 0.01 * std::max(0.0, (25.0 - t) / 20.0));
}

TEST(LrScheduler, CosineClosedForm) {
  auto s = sched(R"({"type": "cosine", "learning_rate": 0.01, "warmup_steps": 10, "lr_end": 0.001,
                     "num_cycles": 0.5})", 110);
  for (int t : {0, 5}) expect_lr(*s, t, 0.01 * t / 10.0);
  for (int t : {10, 35, 60, 109}) {
    const double p = (t - 10) / 100.0;
    expect_lr(*s, t, 0.001 + 0.009 * std::max(0.0, 0.5 * (1 + std::cos(kPi * 0.5 * 2 * p))));
  }
  expect_lr(*s, 110, 0.001);  // t >= D = T
  expect_lr(*s, 500, 0.001);
}

// decay_steps is an absolute cut-off step (checked first): lr jumps to lr_end at t = D.
TEST(LrScheduler, CosineDecayCutOff) {
  auto s = sched(R"({"type": "CosineWithWarmUpLR", "learning_rate": 0.01, "decay_steps": 50,
                     "lr_end": 0.002})", 100);
  expect_lr(*s, 49, 0.002 + 0.008 * 0.5 * (1 + std::cos(kPi * 49 / 100.0)));
  expect_lr(*s, 50, 0.002);
  auto r = sched(R"({"type": "CosineWithWarmUpLR", "learning_rate": 0.01, "decay_ratio": 0.25})", 100);
  expect_lr(*r, 24, 0.01 * 0.5 * (1 + std::cos(kPi * 24 / 100.0)));
  expect_lr(*r, 25, 0.0);
}

TEST(LrScheduler, CosineWithRestartsClosedForm) {
  auto s = sched(R"({"type": "cosine_with_restarts", "learning_rate": 0.01, "warmup_steps": 4,
                     "num_cycles": 2.0, "lr_end": 0.001})", 24);
  EXPECT_EQ(s->type(), "CosineWithRestartsAndWarmUpLR");
  expect_lr(*s, 2, 0.005);
  for (int t : {4, 9, 13, 14, 19, 23}) {
    const double p = (t - 4) / 20.0;
    const double frac = std::fmod(2.0 * p, 1.0);
    expect_lr(*s, t, 0.001 + 0.009 * std::max(0.0, 0.5 * (1 + std::cos(kPi * frac))));
  }
  expect_lr(*s, 24, 0.001);
}

// QUIRK fixed (docs/optimizers.md): past the end of the last cycle (decay_steps > total_steps) the
// reference returns 0; Loom returns lr_end.
TEST(LrScheduler, CosineWithRestartsAfterEndReturnsLrEnd) {
  auto s = sched(R"({"type": "CosineWithRestartsAndWarmUpLR", "learning_rate": 0.01,
                     "warmup_steps": 0, "lr_end": 0.001, "decay_steps": 40})", 20);
  expect_lr(*s, 19, 0.001 + 0.009 * 0.5 * (1 + std::cos(kPi * 19 / 20.0)));
  expect_lr(*s, 20, 0.001);
  expect_lr(*s, 39, 0.001);
  expect_lr(*s, 40, 0.001);
}

TEST(LrScheduler, PolynomialClosedForm) {
  auto s = sched(R"({"type": "polynomial", "learning_rate": 0.01, "warmup_steps": 4, "power": 2.0,
                     "lr_end": 0.0001})", 24);
  expect_lr(*s, 1, 0.0025);
  for (int t : {4, 10, 20, 24}) expect_lr(*s, t, 0.0099 * std::pow(1 - (t - 4) / 20.0, 2.0) + 0.0001);
  expect_lr(*s, 30, 0.0001);
  EXPECT_NE(config_error(R"({"type": "polynomial", "learning_rate": 1e-7, "warmup_steps": 0})")
                .find("lr_scheduler.learning_rate: (1.0e-07) must be greater than lr_end (1.0e-07) for PolynomialWithWarmUpLR"),
            std::string::npos);
}

// Deliberate: with decay_steps < T - W the remaining fraction is clamped at 0 (no rates below
// lr_end, no NaN for fractional powers).
TEST(LrScheduler, PolynomialClampsShortDecay) {
  auto s = sched(R"({"type": "PolynomialWithWarmUpLR", "learning_rate": 0.01, "warmup_steps": 0,
                     "power": 0.5, "lr_end": 0.001, "decay_steps": 10})", 20);
  expect_lr(*s, 5, 0.009 * std::sqrt(0.5) + 0.001);
  expect_lr(*s, 15, 0.001);
  EXPECT_FALSE(std::isnan(s->lr_at(15)));
}

TEST(LrScheduler, WarmUpStableDecayClosedForm) {
  auto s = sched(R"({"type": "WarmUpStableDecayLR", "learning_rate": 0.01, "warmup_steps": 10,
                     "lr_end": 0.001, "decay_start_ratio": 0.8})", 100);
  expect_lr(*s, 5, 0.005);
  for (int t : {10, 50, 79}) expect_lr(*s, t, 0.01);
  for (int t : {80, 90, 99, 100}) expect_lr(*s, t, 0.01 - 0.009 * (t - 80) / 20.0);
  expect_lr(*s, 150, 0.001);
  auto abs = sched(R"({"type": "WarmUpStableDecayLR", "learning_rate": 0.01, "warmup_steps": 0,
                       "decay_start_steps": 60})", 100);
  expect_lr(*abs, 70, 0.01 - (0.01 - 1e-7) * 10 / 40.0);
}

// QUIRK fixed (docs/optimizers.md): without warmup the reference's stable branch L·t/t is NaN at 0.
TEST(LrScheduler, WarmUpStableDecayNoNanAtZero) {
  auto s = sched(R"({"type": "WarmUpStableDecayLR", "learning_rate": 0.01, "warmup_steps": 0,
                     "decay_start_steps": 50})", 100);
  EXPECT_FALSE(std::isnan(s->lr_at(0)));
  expect_lr(*s, 0, 0.01);
  EXPECT_NE(config_error(R"({"type": "WarmUpStableDecayLR", "learning_rate": 0.01, "warmup_steps": 0})")
                .find("lr_scheduler: WarmUpStableDecayLR needs decay_start_steps or decay_start_ratio"),
            std::string::npos);
}

TEST(LrScheduler, CosineAnnealingClosedForm) {
  auto s = sched(R"({"type": "cosine_annealing", "base_lr": 0.01, "t_max": 8, "eta_min": 0.001,
                     "learning_rate": 1e-5})");
  EXPECT_EQ(s->type(), "CosineAnnealingLR");
  for (int t : {0, 3, 8, 12, 16})
    expect_lr(*s, t, 0.001 + 0.009 * 0.5 * (1 + std::cos(kPi * t / 8.0)));
  EXPECT_NE(config_error(R"({"type": "CosineAnnealingLR", "learning_rate": 0.01, "t_max": 8})")
                .find("lr_scheduler.base_lr: is required by CosineAnnealingLR"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"type": "CosineAnnealingLR", "base_lr": 0.01, "t_max": 0})")
                .find("lr_scheduler.t_max: must be >= 1, got 0"),
            std::string::npos);
}

TEST(LrScheduler, CosineAnnealingWarmRestartsClosedForm) {
  auto s = sched(R"({"type": "cosine_annealing_warm_restarts", "base_lr": 0.01, "t_0": 5})");
  for (int t : {0, 3, 5, 7, 12})
    expect_lr(*s, t, 0.01 * 0.5 * (1 + std::cos(kPi * (t % 5) / 5.0)));
  auto m = sched(R"({"type": "CosineAnnealingWarmRestarts", "base_lr": 0.01, "t_0": 4, "t_mult": 2,
                     "eta_min": 0.001})");
  // Periods 4, 8, 16: restarts at 4 and 12.
  auto expected = [](double t_cur, double t_i) {
    return 0.001 + 0.009 * 0.5 * (1 + std::cos(kPi * t_cur / t_i));
  };
  expect_lr(*m, 2, expected(2, 4));
  expect_lr(*m, 4, expected(0, 8));
  expect_lr(*m, 9, expected(5, 8));
  expect_lr(*m, 12, expected(0, 16));
  expect_lr(*m, 20, expected(8, 16));
}

TEST(LrScheduler, ConstantWithCoolDownClosedForm) {
  auto s = sched(R"({"type": "ConstantWithCoolDownLR", "learning_rate": 0.01, "warmup_steps": 2,
                     "keep_steps": 3, "decay_steps": 10, "lr_end1": 0.002, "final_steps": 2,
                     "lr_end2": 0.0005})", 30);
  expect_lr(*s, 1, 0.005);
  for (int t : {2, 4}) expect_lr(*s, t, 0.01);
  for (int t : {5, 8, 14}) {
    const double p = (t - 5) / 10.0;
    expect_lr(*s, t, 0.002 + 0.008 * std::max(0.0, 0.5 * (1 + std::cos(2 * kPi * 0.5 * p))));
  }
  for (int t : {15, 16}) expect_lr(*s, t, 0.002);
  for (int t : {17, 29}) expect_lr(*s, t, 0.0005);
}

// spec §2: warmup_ratio × total_steps wins over warmup_steps, with a warning when both are set.
TEST(LrScheduler, WarmupRatioWinsOverStepsAndWarns) {
  OptionProblems problems;
  auto s = read_lr_scheduler(yaml_like(R"({"type": "ConstantWarmUpLR", "learning_rate": 0.01, "warmup_steps": 2,
                                           "warmup_ratio": 0.25})"), 40, problems);
  EXPECT_EQ(problems.warnings(), (std::vector<std::string>{"lr_scheduler.warmup_steps: is ignored because "
                                                           "warmup_ratio is also set (warmup_ratio wins); set only "
                                                           "one of them"}));
  EXPECT_EQ(s->state()["warmup_steps"], 10);
  expect_lr(*s, 5, 0.005);
  // int(total · ratio) truncates.
  auto t = sched(R"({"type": "ConstantWarmUpLR", "learning_rate": 0.01, "warmup_ratio": 0.01})", 150);
  EXPECT_EQ(t->state()["warmup_steps"], 1);
}

// spec §2 note: total_steps comes from training.steps; setting it is an error.
TEST(LrScheduler, TotalStepsIsInjectedNotUserSet) {
  EXPECT_NE(config_error(R"({"type": "ConstantWarmUpLR", "learning_rate": 0.01, "warmup_steps": 1,
                             "total_steps": 100})")
                .find("lr_scheduler.total_steps: must not be set: Loom passes training.steps (20) as total_steps"),
            std::string::npos);
  auto ok = sched(R"({"type": "LinearWithWarmUpLR", "learning_rate": 0.01, "warmup_steps": 0,
                      "total_steps": null})", 10);
  EXPECT_EQ(ok->state()["total_steps"], 10);
}

// The reference raises TypeError on a missing warmup_steps (default None); Loom names the keys.
TEST(LrScheduler, MissingWarmupIsClearConfigError) {
  for (const char* type : {"ConstantWarmUpLR", "LinearWithWarmUpLR", "CosineWithRestartsAndWarmUpLR",
                           "PolynomialWithWarmUpLR", "WarmUpStableDecayLR", "ConstantWithCoolDownLR"}) {
    const std::string msg = config_error(std::string(R"({"type": ")") + type + R"(", "learning_rate": 0.01})");
    EXPECT_NE(msg.find("lr_scheduler: " + std::string(type) + " needs warmup_steps or warmup_ratio (write "
                       "warmup_steps: 0 for no warmup)"), std::string::npos) << msg;
  }
  // CosineWithWarmUpLR defaults warmup_steps to 0.
  auto c = sched(R"({"type": "CosineWithWarmUpLR", "learning_rate": 0.01})");
  expect_lr(*c, 0, 0.01);
}

TEST(LrScheduler, FieldErrorsNameTheKey) {
  EXPECT_NE(config_error(R"({"type": "ConstantWarmUpLR", "warmup_steps": 10.5})")
                .find("lr_scheduler.warmup_steps: expected int, got float 10.5"), std::string::npos);
  EXPECT_NE(config_error(R"({"type": "ConstantWarmUpLR", "warmup_steps": -1})")
                .find("lr_scheduler.warmup_steps: must be >= 0, got -1"), std::string::npos);
  EXPECT_NE(config_error(R"({"type": "ConstantWarmUpLR", "warmup_ratio": 1.5})")
                .find("lr_scheduler.warmup_ratio: must be in [0, 1], got 1.5"), std::string::npos);
  EXPECT_NE(config_error(R"({"type": "Step"})").find("lr_scheduler.type: unknown scheduler 'Step'"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"learning_rate": 0.1})").find("lr_scheduler.type: is required"),
            std::string::npos);
}

// The reference silently ignores unknown kwargs (e.g. lr_end on LinearWithWarmUpLR); Loom warns.
TEST(LrScheduler, UnknownKeysWarn) {
  OptionProblems problems;
  auto s = read_lr_scheduler(yaml_like(R"({"type": "LinearWithWarmUpLR", "learning_rate": 0.01, "warmup_steps": 0,
                                           "lr_end": 0.001, "decay_steps": 5})"), 20, problems);
  EXPECT_EQ(problems.warnings(),
            (std::vector<std::string>{"lr_scheduler.lr_end: is not a parameter of LinearWithWarmUpLR and is ignored",
                                      "lr_scheduler.decay_steps: is not a parameter of LinearWithWarmUpLR and is "
                                      "ignored"}));
  expect_lr(*s, 10, 0.005);  // decays to 0, not to the ignored lr_end
}

TEST(LrScheduler, AllTenTypesAndAliasesBuild) {
  EXPECT_EQ(lr_scheduler_types().size(), 10u);
  const char* cases[] = {
      R"({"type": "constant_with_warmup", "warmup_steps": 0})",
      R"({"type": "linear", "warmup_steps": 0})",
      R"({"type": "cosine"})",
      R"({"type": "cosine_with_restarts", "warmup_steps": 0})",
      R"({"type": "polynomial", "warmup_steps": 0})",
      R"({"type": "WarmUpStableDecayLR", "warmup_steps": 0, "decay_start_steps": 10})",
      R"({"type": "cosine_annealing", "base_lr": 1e-5, "t_max": 10})",
      R"({"type": "cosine_annealing_warm_restarts", "base_lr": 1e-5, "t_0": 10})",
      R"({"type": "ConstantWithCoolDownLR", "warmup_steps": 0, "decay_steps": 5})",
      R"({"type": "LearningRateWiseLayer", "lr_scale": 0.5, "base_lr": {"type": "cosine"}})",
  };
  std::vector<std::string> types;
  for (const char* c : cases) types.push_back(sched(c)->type());
  EXPECT_EQ(types, lr_scheduler_types());
}

// The schedule's resolved parameters go into checkpoints; a changed schedule on resume warns.
TEST(LrScheduler, StateRecordsResolvedParameters) {
  auto s = sched(R"({"type": "CosineWithWarmUpLR", "learning_rate": 0.01, "warmup_ratio": 0.1})", 50);
  auto st = s->state();
  EXPECT_EQ(st["type"], "CosineWithWarmUpLR");
  EXPECT_EQ(st["warmup_steps"], 5);
  EXPECT_EQ(st["decay_steps"], 50);
  EXPECT_TRUE(s->load_state(st).empty());
  auto changed = st;
  changed["learning_rate"] = 0.02;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(s->load_state(changed), (std::vector<std::string>{"learning_rate"}));
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("different schedule"), std::string::npos);
}

// training_hyperparameters.md §2 registers LearningRateWiseLayer (MindFormers' lr_schedule.py):
// lr(t) = lr_scale * base_lr(t) in float32, base_lr being any schedule written as a map; it takes
// the section's learning_rate when it writes none, and training.steps as its total_steps.
TEST(LrScheduler, LearningRateWiseLayerScalesItsBaseSchedule) {
  auto base = sched(R"({"type": "CosineWithWarmUpLR", "learning_rate": 0.01, "warmup_steps": 2})", 20);
  auto wise = sched(R"({"type": "LearningRateWiseLayer", "learning_rate": 0.01, "lr_scale": 0.25,
                        "base_lr": {"type": "CosineWithWarmUpLR", "warmup_steps": 2}})", 20);
  EXPECT_EQ(wise->type(), "LearningRateWiseLayer");
  for (int64_t t : {0, 1, 2, 7, 19})
    EXPECT_EQ(wise->lr_at(t), static_cast<double>(0.25f * static_cast<float>(base->lr_at(t)))) << t;
  expect_lr(*wise, 1, 0.25 * 0.005);
  EXPECT_EQ(wise->state()["base_lr"]["type"], "CosineWithWarmUpLR");
  EXPECT_EQ(wise->state()["base_lr"]["total_steps"], 20);
  EXPECT_EQ(wise->state()["lr_scale"], 0.25);
  // The base schedule's own problems carry its path; the required keys are named.
  EXPECT_NE(config_error(R"({"type": "LearningRateWiseLayer", "lr_scale": 0.5})")
                .find("lr_scheduler.base_lr: is required by LearningRateWiseLayer"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"type": "LearningRateWiseLayer", "base_lr": {"type": "cosine"}})")
                .find("lr_scheduler.lr_scale: is required by LearningRateWiseLayer"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"type": "LearningRateWiseLayer", "lr_scale": 1, "base_lr": {"type": "cosine",
                             "warmup_ratio": 2}})")
                .find("lr_scheduler.base_lr.warmup_ratio: must be in [0, 1], got 2"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"type": "LearningRateWiseLayer", "learning_rate": 0.1, "lr_scale": 1,
                             "base_lr": {"type": "cosine", "learning_rate": 0.2}})")
                .find("lr_scheduler.learning_rate: is also set in base_lr"),
            std::string::npos);
}
