// `--set key=value` overrides: applied to the YAML document before validation, with the same
// typing rules, and their mistakes reported like the file's (marked "--set ...").
#include <gtest/gtest.h>

#include "config_test_util.h"
#include "loom/config/overrides.h"

using namespace loom;
using namespace loom::config;
using namespace loom::config::testing;

TEST(Overrides, ScalarAndFlowListValues) {
  LoadedConfig c = load("training:\n  steps: 100\n", std::nullopt, {"training.steps=20", "optimizer.betas=[0.9,0.99]"});
  EXPECT_EQ(c.config.training.steps, 20);
  EXPECT_EQ(c.config.optimizer.betas, (std::vector<double>{0.9, 0.99}));
  EXPECT_TRUE(c.config.is_explicit("optimizer.betas"));
}

TEST(Overrides, MissingPathsAreCreated) {
  LoadedConfig c = load("", std::nullopt,
                        {"monitor.tensorboard.output_dir=runs/tb", "swap.enable=true", "swap.layer_swap=[{layers: [0-1]}]"});
  EXPECT_EQ(c.config.monitor.tensorboard.output_dir, "runs/tb");
  EXPECT_TRUE(c.config.swap.enable);
  ASSERT_TRUE(c.config.swap.layer_swap.has_value());
  EXPECT_EQ((*c.config.swap.layer_swap)[0].layers.specs, (std::vector<std::string>{"0-1"}));
}

TEST(Overrides, EmptySectionBecomesAMapping) {
  LoadedConfig c = load_config_text(with_defaults("training:\n"), "t.yaml", options(std::nullopt, {"training.seed=7"}));
  EXPECT_EQ(c.config.training.seed, 7);
}

TEST(Overrides, LaterOverridesWin) {
  EXPECT_EQ(load("", std::nullopt, {"training.steps=5", "training.steps=6"}).config.training.steps, 6);
}

TEST(Overrides, FlowMapsNullsAndFloats) {
  LoadedConfig c = load("", std::nullopt,
                        {"checkpoint.prefix=null", "lr_scheduler.learning_rate=1e-4", "model.rope_scaling={type: yarn, factor: 40}"});
  EXPECT_FALSE(c.config.checkpoint.prefix.has_value());
  EXPECT_DOUBLE_EQ(c.config.lr_scheduler.learning_rate, 1e-4);
  EXPECT_EQ(c.config.model.extras["rope_scaling"]["factor"], 40);
}

TEST(Overrides, QuotedKeysAndListIndices) {
  LoadedConfig c = load("recompute:\n  mode: select\n  select_module:\n    '.*mlp': ['0']\noptimizer:\n  betas: [0.9, 0.95]\n",
                        std::nullopt,
                        {"recompute.select_module['.*mlp']=[0-3]", "optimizer.betas[1]=0.98"});
  EXPECT_EQ(c.config.recompute.select_module->entries[0].layers.specs, (std::vector<std::string>{"0-3"}));
  EXPECT_EQ(c.config.optimizer.betas, (std::vector<double>{0.9, 0.98}));
  // Index == size appends, which here makes betas too long.
  EXPECT_NE(errors("optimizer:\n  betas: [0.9, 0.95]\n", std::nullopt, {"optimizer.betas[2]=0.5"})
                .find("optimizer.betas: must hold exactly 2 values"),
            std::string::npos);
  EXPECT_EQ(errors("optimizer:\n  betas: [0.9, 0.95]\n", std::nullopt, {"optimizer.betas[5]=0.5"}),
            "--set optimizer.betas[5]=0.5: optimizer.betas has 2 items; index 5 is past its end (use index 2 to append)");
  // An index into a list the file does not have fails alone, without a half-created path.
  EXPECT_EQ(errors("", std::nullopt, {"optimizer.betas[1]=0.5"}),
            "--set optimizer.betas[1]=0.5: optimizer.betas is null, not a list; [1] cannot be set");
}

// "the same typing rules"
TEST(Overrides, ValuesAreTypedLikeTheFile) {
  EXPECT_EQ(errors("", std::nullopt, {"training.steps=abc"}),
            "--set training.steps=abc: training.steps: expected int, got str 'abc'");
  EXPECT_EQ(errors("", std::nullopt, {"training.deterministic=1"}),
            "--set training.deterministic=1: training.deterministic: expected bool, got int 1");
}

// "an override that names an unknown key is reported like a file error"
TEST(Overrides, UnknownKeysAreReportedWithTheOverride) {
  EXPECT_EQ(errors("", std::nullopt, {"training.stpes=20"}),
            "--set training.stpes=20: training.stpes: Unknown configuration keys for TrainingConfig: ['stpes']; did you "
            "mean 'steps'?");
}

TEST(Overrides, ErrorsOfFileAndOverridesAreReportedTogether) {
  const std::string e = errors("training:\n  seed: x\n", std::nullopt, {"training.steps=abc"});
  EXPECT_NE(e.find("test.yaml:2:9: training.seed: expected int"), std::string::npos) << e;
  EXPECT_NE(e.find("--set training.steps=abc: training.steps: expected int"), std::string::npos) << e;
}

TEST(Overrides, MalformedOverrides) {
  EXPECT_NE(errors("", std::nullopt, {"training.steps"}).find("--set training.steps: missing '=' between the key and the value"),
            std::string::npos);
  EXPECT_NE(errors("", std::nullopt, {"=5"}).find("empty key"), std::string::npos);
  EXPECT_NE(errors("", std::nullopt, {"training..steps=5"}).find("empty key"), std::string::npos);
  EXPECT_NE(errors("", std::nullopt, {"optimizer.betas=[0.9, 0.99"}).find("value '[0.9, 0.99' is not valid YAML"),
            std::string::npos);
  EXPECT_NE(errors("", std::nullopt, {"optimizer.betas[x]=1"}).find("list index '[x]' must be a non-negative integer"),
            std::string::npos);
  EXPECT_NE(errors("training:\n  steps: 10\n", std::nullopt, {"training.steps.x=1"})
                .find("--set training.steps.x=1: training.steps is int 10, not a mapping; 'x' cannot be set under it"),
            std::string::npos);
  EXPECT_NE(errors("", std::nullopt, {"training.steps=\x01"}).find("control character"), std::string::npos);
}

TEST(Overrides, ParseOverridePaths) {
  Override o = parse_override("a.b[2]['c.d'].e=x=y");
  ASSERT_EQ(o.path.size(), 5u);
  EXPECT_EQ(o.path[0].key, "a");
  EXPECT_EQ(o.path[1].key, "b");
  EXPECT_TRUE(o.path[2].is_index);
  EXPECT_EQ(o.path[2].index, 2u);
  EXPECT_EQ(o.path[3].key, "c.d");
  EXPECT_EQ(o.path[4].key, "e");
  EXPECT_EQ(o.value_text, "x=y");
}
