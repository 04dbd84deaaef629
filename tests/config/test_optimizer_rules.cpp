// optimizer and lr_scheduler rules of training_hyperparameters.md (AdamW ranges, Muon
// prerequisites, scheduler types and fields) and MindFormers' optimizers and lr_schedule.py.
#include <gtest/gtest.h>

#include "config_test_util.h"
#include "loom/optim/optimizer_factory.h"

using namespace loom;
using namespace loom::config;
using namespace loom::config::testing;

namespace {
const std::string kMla = "model:\n  model_type: deepseek_v3\n  num_hidden_layers: 4\n  multi_latent_attention: true\n";
}

TEST(OptimizerRules, TypeIsAdamWOrMuon) {
  EXPECT_NE(errors("optimizer:\n  type: adamw\n").find("optimizer.type: must be 'AdamW' or 'Muon', got 'adamw'; did you "
                                                       "mean 'AdamW'?"),
            std::string::npos);
}

// §1.1 table: betas length 2, each in [0, 1); eps > 0; weight_decay >= 0.
TEST(OptimizerRules, AdamWRanges) {
  EXPECT_NE(errors("optimizer:\n  betas: [0.9]\n").find("optimizer.betas: must hold exactly 2 values"), std::string::npos);
  EXPECT_NE(errors("optimizer:\n  betas: [0.9, 1.0]\n").find("optimizer.betas[1]: must be in [0, 1), got 1.0"),
            std::string::npos);
  EXPECT_NE(errors("optimizer:\n  betas: [-0.1, 0.9]\n").find("optimizer.betas[0]: must be in [0, 1)"), std::string::npos);
  EXPECT_NE(errors("optimizer:\n  eps: 0\n").find("optimizer.eps: must be > 0, got 0.0"), std::string::npos);
  EXPECT_NE(errors("optimizer:\n  weight_decay: -0.1\n").find("optimizer.weight_decay: must be >= 0"), std::string::npos);
  // The reference rejects an int 0 (QUIRK); Loom accepts it like any float field.
  EXPECT_EQ(errors("optimizer:\n  weight_decay: 0\n"), "");
}

TEST(OptimizerRules, AdamWExtras) {
  EXPECT_NE(errors("optimizer:\n  enable_cpu_offload: true\n").find("AdamW does not support enable_cpu_offload: true"),
            std::string::npos);
  EXPECT_NE(errors("optimizer:\n  use_fused: 1\n").find("optimizer.use_fused: expected bool, got int 1"),
            std::string::npos);
  const std::string w = warnings("optimizer:\n  momentum: 0.9\n  learning_rate: 0.1\n");
  EXPECT_NE(w.find("optimizer.momentum: is not a parameter of AdamW and is ignored"), std::string::npos) << w;
  EXPECT_NE(w.find("optimizer.learning_rate: is ignored: the learning rate comes from lr_scheduler.learning_rate"),
            std::string::npos);
}

// §1.2: "The value of multi_latent_attention must be True. Otherwise, `... only supports models
// with Multi-Latent Attention enabled.` is reported."
TEST(OptimizerRules, MuonNeedsMultiLatentAttention) {
  EXPECT_NE(errors("optimizer:\n  type: Muon\n").find("optimizer.type: Muon optimizer only supports models with "
                                                      "Multi-Latent Attention enabled."),
            std::string::npos);
  EXPECT_NE(errors("optimizer:\n  type: Muon\nmodel:\n  model_type: deepseek_v3\n  multi_latent_attention: false\n")
                .find("only supports models with Multi-Latent Attention enabled."),
            std::string::npos);
  EXPECT_EQ(errors("optimizer:\n  type: Muon\n" + kMla), "");
  // A DeepSeek-V3 model is MLA even when its HF config does not say so.
  EXPECT_EQ(errors("optimizer:\n  type: Muon\nmodel:\n  architectures: DeepseekV3ForCausalLM\n"), "");
}

// §1.2 point 4: "Muon does not support swap."
TEST(OptimizerRules, MuonRejectsSwap) {
  EXPECT_NE(errors("optimizer:\n  type: Muon\n  swap: true\n" + kMla).find("optimizer.swap: Muon does not support swap."),
            std::string::npos);
}

TEST(OptimizerRules, MuonExtras) {
  const std::string e = errors(
      "optimizer:\n  type: Muon\n  momentum: 1.5\n  ns_steps: 0\n  ns_coefficients: [1, 2]\n  adamw_betas: [0.95]\n"
      "  adamw_eps: 0\n  qk_clip_threshold: 0\n  comm_strategy: allgater\n  nesterov: 1\n" + kMla);
  EXPECT_NE(e.find("optimizer.momentum: must be in [0, 1), got 1.5"), std::string::npos) << e;
  EXPECT_NE(e.find("optimizer.ns_steps: must be >= 1, got 0"), std::string::npos);
  EXPECT_NE(e.find("optimizer.ns_coefficients: must be a flat triplet [a, b, c] or segments"), std::string::npos);
  EXPECT_NE(e.find("optimizer.adamw_betas: must hold exactly 2 values"), std::string::npos);
  EXPECT_NE(e.find("optimizer.adamw_eps: must be > 0"), std::string::npos);
  EXPECT_NE(e.find("optimizer.qk_clip_threshold: must be > 0 while qk_clip_enabled is true"), std::string::npos);
  EXPECT_NE(e.find("optimizer.comm_strategy: must be 'allgather' or 'allgather_deredundency', got 'allgater'; did you "
                   "mean 'allgather'?"),
            std::string::npos);
  EXPECT_NE(e.find("optimizer.nesterov: expected bool, got int 1"), std::string::npos);
  // Segmented schedule [[[a, b, c], count], ...] (DeepSeek V4 style).
  EXPECT_EQ(errors("optimizer:\n  type: Muon\n  ns_coefficients: [[[3.4445, -4.7750, 2.0315], 8], [[2.0, -1.5, 0.5], 2]]\n" +
                   kMla),
            "");
  EXPECT_NE(errors("optimizer:\n  type: Muon\n  ns_coefficients: [[[3.4, -4.7, 2.0], 0]]\n" + kMla).find("count >= 1"),
            std::string::npos);
  EXPECT_EQ(errors("optimizer:\n  type: Muon\n  qk_clip_enabled: false\n  qk_clip_threshold: 0\n" + kMla), "");
}

// §1.2 field table: Muon's weight_decay defaults to 0.1 and its eps to 1.0e-7, not AdamW's 0.01 and
// 1.0e-8 (§1.1). The trainer builds the optimizer from the section as written, through
// optim::read_optimizer_section; the typed fields show the same values.
TEST(OptimizerRules, MuonTakesItsOwnDefaults) {
  const LoadedConfig c = load("optimizer:\n  type: Muon\n" + kMla);
  EXPECT_DOUBLE_EQ(c.config.optimizer.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(c.config.optimizer.eps, 1e-7);
  optim::OptionProblems problems;
  const optim::OptimizerSection built = optim::read_optimizer_section(c.config.optimizer.section, problems);
  ASSERT_TRUE(std::holds_alternative<optim::MuonOptions>(built.options));
  const optim::MuonOptions& muon = std::get<optim::MuonOptions>(built.options);
  EXPECT_DOUBLE_EQ(muon.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(muon.eps, 1e-7);
  EXPECT_TRUE(problems.all().empty());
  // Written values still win.
  const LoadedConfig set = load("optimizer:\n  type: Muon\n  weight_decay: 0.01\n  eps: 1.e-8\n" + kMla);
  EXPECT_DOUBLE_EQ(set.config.optimizer.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(set.config.optimizer.eps, 1e-8);
}

TEST(OptimizerRules, MuonWarnsAboutAdamWBetas) {
  EXPECT_NE(warnings("optimizer:\n  type: Muon\n  betas: [0.8, 0.9]\n" + kMla).find("is not used by Muon"),
            std::string::npos);
}

// §2: the scheduler types of the registry and their lower-case aliases (lr_schedule.py).
TEST(SchedulerRules, TypesAndAliases) {
  for (const char* type : {"ConstantWarmUpLR", "LinearWithWarmUpLR", "CosineWithWarmUpLR", "CosineWithRestartsAndWarmUpLR",
                           "PolynomialWithWarmUpLR"})
    EXPECT_EQ(errors(std::string("lr_scheduler:\n  type: ") + type + "\n  warmup_steps: 0\n"), "") << type;
  EXPECT_EQ(errors("lr_scheduler:\n  type: WarmUpStableDecayLR\n  warmup_steps: 0\n  decay_start_steps: 10\n"), "");
  EXPECT_EQ(errors("lr_scheduler:\n  type: ConstantWithCoolDownLR\n  warmup_steps: 0\n  decay_steps: 10\n"), "");
  EXPECT_EQ(errors("lr_scheduler:\n  type: CosineAnnealingLR\n  base_lr: 1.e-5\n  t_max: 10\n"), "");
  EXPECT_EQ(errors("lr_scheduler:\n  type: CosineAnnealingWarmRestarts\n  base_lr: 1.e-5\n  t_0: 10\n"), "");
  const std::pair<const char*, const char*> aliases[] = {
      {"constant_with_warmup", "ConstantWarmUpLR"},       {"linear", "LinearWithWarmUpLR"},
      {"cosine", "CosineWithWarmUpLR"},                   {"cosine_with_restarts", "CosineWithRestartsAndWarmUpLR"},
      {"polynomial", "PolynomialWithWarmUpLR"}};
  for (const auto& [alias, name] : aliases) {
    LoadedConfig c = load(std::string("lr_scheduler:\n  type: ") + alias + "\n  warmup_steps: 0\n");
    EXPECT_EQ(c.config.lr_scheduler.type, name) << alias;
  }
  EXPECT_EQ(load("lr_scheduler:\n  type: cosine_annealing\n  base_lr: 0.1\n  t_max: 3\n").config.lr_scheduler.type,
            "CosineAnnealingLR");
  EXPECT_EQ(load("lr_scheduler:\n  type: cosine_annealing_warm_restarts\n  base_lr: 0.1\n  t_0: 3\n").config.lr_scheduler.type,
            "CosineAnnealingWarmRestarts");
  EXPECT_NE(errors("lr_scheduler:\n  type: CosineWarmUpLR\n").find("unknown scheduler 'CosineWarmUpLR'; did you mean "
                                                                   "'ConstantWarmUpLR' or 'CosineWithWarmUpLR'?"),
            std::string::npos);
}

// §2: "Users must not manually set total_steps": the framework injects training.steps.
TEST(SchedulerRules, TotalStepsIsInjected) {
  EXPECT_NE(errors("lr_scheduler:\n  type: CosineWithWarmUpLR\n  total_steps: 500\ntraining:\n  steps: 1000\n")
                .find("lr_scheduler.total_steps: must not be set: Loom passes training.steps (1000) as total_steps"),
            std::string::npos);
}

// §2: set only one of warmup_ratio / warmup_steps; if both, warmup_ratio wins.
TEST(SchedulerRules, WarmupRatioWinsOverWarmupSteps) {
  EXPECT_NE(warnings("lr_scheduler:\n  type: ConstantWarmUpLR\n  warmup_ratio: 0.1\n  warmup_steps: 10\n")
                .find("lr_scheduler.warmup_steps: is ignored because warmup_ratio is also set (warmup_ratio wins)"),
            std::string::npos);
}

// lr_schedule.py's _get_lr_steps: warmup_steps None without warmup_ratio is a TypeError.
TEST(SchedulerRules, WarmupIsRequiredWhereItDefaultsToNone) {
  EXPECT_NE(errors("lr_scheduler:\n  type: LinearWithWarmUpLR\n").find("LinearWithWarmUpLR needs warmup_steps or "
                                                                       "warmup_ratio"),
            std::string::npos);
  EXPECT_EQ(errors("lr_scheduler:\n  type: CosineWithWarmUpLR\n"), "");  // warmup_steps defaults to 0 there
}

// lr_schedule.py: WSD's decay_start_steps and the cool-down's decay_steps also default to None and
// go through _get_lr_steps; check-config refuses what the trainer's build refuses.
TEST(SchedulerRules, DecayStartAndCoolDownAreRequired) {
  EXPECT_NE(errors("lr_scheduler:\n  type: WarmUpStableDecayLR\n  warmup_steps: 0\n")
                .find("lr_scheduler: WarmUpStableDecayLR needs decay_start_steps or decay_start_ratio"),
            std::string::npos);
  EXPECT_NE(errors("lr_scheduler:\n  type: ConstantWithCoolDownLR\n  warmup_steps: 0\n")
                .find("lr_scheduler: ConstantWithCoolDownLR needs decay_steps or decay_ratio"),
            std::string::npos);
  EXPECT_EQ(errors("lr_scheduler:\n  type: WarmUpStableDecayLR\n  warmup_steps: 0\n  decay_start_ratio: 0.8\n"), "");
}

TEST(SchedulerRules, FieldRangesAndTypes) {
  EXPECT_NE(errors("lr_scheduler:\n  type: ConstantWarmUpLR\n  warmup_ratio: 1.5\n").find("warmup_ratio: must be in [0, 1]"),
            std::string::npos);
  EXPECT_NE(errors("lr_scheduler:\n  type: ConstantWarmUpLR\n  warmup_steps: -1\n").find("warmup_steps: must be >= 0"),
            std::string::npos);
  EXPECT_NE(errors("lr_scheduler:\n  type: ConstantWarmUpLR\n  warmup_steps: 1.5\n").find("warmup_steps: expected int"),
            std::string::npos);
  EXPECT_NE(errors("lr_scheduler:\n  type: CosineWithWarmUpLR\n  lr_end: x\n").find("lr_scheduler.lr_end: expected float"),
            std::string::npos);
  EXPECT_NE(errors("lr_scheduler:\n  type: ConstantWarmUpLR\n  warmup_steps: 0\n  learning_rate: -1\n")
                .find("learning_rate: must be >= 0"),
            std::string::npos);
  EXPECT_NE(warnings("lr_scheduler:\n  type: ConstantWarmUpLR\n  warmup_steps: 5000\n").find("the run never leaves warmup"),
            std::string::npos);
}

// §2.7: CosineAnnealingLR uses base_lr and t_max (no learning_rate, no warmup).
TEST(SchedulerRules, CosineAnnealingNeedsBaseLrAndTMax) {
  const std::string e = errors("lr_scheduler:\n  type: CosineAnnealingLR\n");
  EXPECT_NE(e.find("lr_scheduler.base_lr: is required by CosineAnnealingLR (it uses base_lr instead of learning_rate)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("lr_scheduler.t_max: is required by CosineAnnealingLR"), std::string::npos);
  EXPECT_NE(errors("lr_scheduler:\n  type: CosineAnnealingLR\n  base_lr: 0.1\n  t_max: 0\n").find("t_max: must be >= 1"),
            std::string::npos);
  EXPECT_NE(warnings("lr_scheduler:\n  type: CosineAnnealingLR\n  base_lr: 0.1\n  t_max: 5\n  learning_rate: 0.2\n")
                .find("is not used by CosineAnnealingLR; its base learning rate is base_lr"),
            std::string::npos);
}

// lr_schedule.py: Polynomial and WSD require learning_rate > lr_end.
TEST(SchedulerRules, DecayMustGoDown) {
  EXPECT_NE(errors("lr_scheduler:\n  type: PolynomialWithWarmUpLR\n  warmup_steps: 0\n  learning_rate: 1.e-7\n")
                .find("(1.0e-07) must be greater than lr_end (1.0e-07) for PolynomialWithWarmUpLR"),
            std::string::npos);
  EXPECT_NE(errors("lr_scheduler:\n  type: WarmUpStableDecayLR\n  warmup_steps: 0\n  lr_end: 0.1\n  learning_rate: 0.01\n")
                .find("must be greater than lr_end (0.1)"),
            std::string::npos);
}

// Unknown scheduler arguments are silently ignored by the reference; Loom says so.
TEST(SchedulerRules, ArgumentsTheSchedulerDoesNotTakeWarn) {
  EXPECT_NE(warnings("lr_scheduler:\n  type: LinearWithWarmUpLR\n  warmup_steps: 0\n  lr_end: 0.0\n")
                .find("lr_scheduler.lr_end: is not a parameter of LinearWithWarmUpLR and is ignored"),
            std::string::npos);
  EXPECT_NE(warnings("lr_scheduler:\n  type: CosineWithWarmUpLR\n  num_cycle: 0.5\n").find("did you mean 'num_cycles'?"),
            std::string::npos);
}
