// Every YAML example of the spec (spec/*.md) is a fixture
// (tests/fixtures/config/spec/<doc>_<n>.yaml, completed where the example is partial, as its header
// says) and behaves as its document says: valid at the stated device count with the stated layout,
// and the documented invalid combinations (an override away from the example) rejected with the
// documented message.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "config_test_util.h"

using namespace loom;
using namespace loom::config;
using namespace loom::config::testing;

namespace {

std::string fixture(const std::string& name) { return std::string(LOOM_FIXTURES_DIR) + "/config/spec/" + name + ".yaml"; }

LoadedConfig load_fixture(const std::string& name, int world, std::vector<std::string> overrides = {}) {
  return load_config_checked(fixture(name), options(world, std::move(overrides)));
}

std::string fixture_errors(const std::string& name, int world, std::vector<std::string> overrides = {}) {
  try {
    load_fixture(name, world, std::move(overrides));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

void expect_dims(const LoadedConfig& c, int dp_replicate, int dp_shard, int cp, int tp, int pp, int ep, int efsdp) {
  ASSERT_TRUE(c.resolved.has_value());
  const auto& d = c.resolved->layout.dims;
  EXPECT_EQ(d.dp_replicate(), dp_replicate);
  EXPECT_EQ(d.dp_shard(), dp_shard);
  EXPECT_EQ(d.cp(), cp);
  EXPECT_EQ(d.tp(), tp);
  EXPECT_EQ(d.pp(), pp);
  EXPECT_EQ(d.ep(), ep);
  EXPECT_EQ(d.efsdp(), efsdp);
}

// The examples that need no more than "loads without errors" at their device count.
const std::vector<std::pair<std::string, int>> kPlainValid = {
    {"configuration_2", 1},          {"configuration_5", 1},          {"configuration_6", 1},
    {"configuration_7", 1},          {"configuration_8", 1},          {"configuration_9", 1},
    {"configuration_10", 1},         {"configuration_11", 1},         {"configuration_13", 1},
    {"configuration_14", 1},         {"configuration_15", 1},         {"configuration_16", 1},
    {"parallel_training_1", 1},      {"memory_optimization_1", 1},
    {"memory_optimization_2", 1},    {"memory_optimization_3", 1},    {"memory_optimization_4", 1},
    {"memory_optimization_6", 1},    {"memory_optimization_7", 1},    {"training_hyperparameters_1", 1},
    {"training_hyperparameters_2", 1}, {"training_hyperparameters_4", 1}, {"training_hyperparameters_6", 1},
    {"training_hyperparameters_7", 1}, {"training_hyperparameters_8", 1}, {"training_hyperparameters_9", 1},
    {"training_hyperparameters_10", 1}, {"training_hyperparameters_11", 1}, {"training_hyperparameters_14", 1},
    {"other_training_features_3", 1}, {"other_training_features_4", 1}, {"other_training_features_5", 1},
};

}  // namespace

// Every fixture in the folder is exercised by a test below (a new example cannot go untested).
TEST(SpecExamples, EveryFixtureIsCovered) {
  std::set<std::string> covered;
  for (const auto& [name, world] : kPlainValid) covered.insert(name);
  for (const char* name :
       {"configuration_1", "configuration_3", "configuration_4", "configuration_12", "parallel_training_2",
        "parallel_training_3", "parallel_training_4", "parallel_training_5", "parallel_training_6",
        "parallel_training_7", "parallel_training_8", "parallel_training_9", "parallel_training_10",
        "parallel_training_11", "parallel_training_12", "parallel_training_13", "memory_optimization_5",
        "memory_optimization_8", "training_hyperparameters_3", "training_hyperparameters_5",
        "training_hyperparameters_12", "training_hyperparameters_13", "other_training_features_1",
        "other_training_features_2"})
    covered.insert(name);
  std::set<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(LOOM_FIXTURES_DIR) + "/config/spec"))
    files.insert(entry.path().stem().string());
  EXPECT_EQ(files, covered);
  EXPECT_EQ(files.size(), 56u);  // 16 + 13 + 8 + 14 + 5 YAML examples in the five spec documents
}

TEST(SpecExamples, PlainValidExamples) {
  for (const auto& [name, world] : kPlainValid) EXPECT_EQ(fixture_errors(name, world), "") << name << " @ " << world;
}

// configuration.md "Complete YAML Skeleton": runs as is on one device and on eight.
TEST(SpecExamples, ConfigurationSkeleton) {
  LoadedConfig one = load_fixture("configuration_1", 1);
  EXPECT_TRUE(one.warnings.empty()) << joined(one.warnings);
  EXPECT_EQ(one.resolved->layout.num_accumulation_steps, 8);
  EXPECT_EQ(one.config.model.model_type, "deepseek_v3");
  EXPECT_EQ(one.config.train_dataset.dataloader.extras["config"]["seq_length"], 4096);
  EXPECT_DOUBLE_EQ(one.config.lr_scheduler.learning_rate, 1e-5);
  LoadedConfig eight = load_fixture("configuration_1", 8);
  expect_dims(eight, 1, 8, 1, 1, 1, 1, 8);
  EXPECT_EQ(eight.resolved->layout.num_accumulation_steps, 1);
}

TEST(SpecExamples, ConfigurationTrainingAndParallelism) {
  EXPECT_EQ(load_fixture("configuration_3", 1).resolved->layout.num_accumulation_steps, 8);  // 16 // (1 * 2)
  LoadedConfig c = load_fixture("configuration_4", 16);
  expect_dims(c, 1, 4, 1, 2, 2, 8, 1);
  ASSERT_EQ(c.resolved->layout.pipeline->stages.size(), 2u);
  EXPECT_EQ(c.resolved->layout.pipeline->stages[1].layers, (LayerRange{6, 11}));
  // "EP >= npu_nums_per_device" for alltoall_deredundancy.
  EXPECT_NE(fixture_errors("configuration_4", 16, {"parallelism.expert_parallel=4"})
                .find("requires expert_parallel >= npu_nums_per_device"),
            std::string::npos);
}

TEST(SpecExamples, ConfigurationSelectRecompute) {
  LoadedConfig c = load_fixture("configuration_12", 1);
  EXPECT_NE(joined(c.warnings).find("pattern 'attention' matches no module"), std::string::npos);
}

// parallel_training.md §1.4 Scenario A and B, §2.4.
TEST(SpecExamples, DataAndTensorParallelScenarios) {
  expect_dims(load_fixture("parallel_training_2", 8), 1, 8, 1, 1, 1, 1, 8);
  expect_dims(load_fixture("parallel_training_3", 16), 2, 8, 1, 1, 1, 1, 8);
  LoadedConfig tp = load_fixture("parallel_training_4", 8);
  expect_dims(tp, 1, 4, 1, 2, 1, 1, 8);
  EXPECT_NE(fixture_errors("parallel_training_4", 7).find("world_size must be divisible by tensor_parallel"),
            std::string::npos);
}

// §3.3 and §3.5: CP needs a compressed mask; colossal, ulysses and hybrid scenarios on 8 devices.
TEST(SpecExamples, ContextParallelScenarios) {
  EXPECT_EQ(load_fixture("parallel_training_5", 2).resolved->layout.dims.cp(), 2);
  EXPECT_EQ(load_fixture("parallel_training_6", 2).resolved->layout.dims.cp(), 2);
  LoadedConfig a = load_fixture("parallel_training_7", 8);
  expect_dims(a, 1, 4, 2, 1, 1, 1, 8);
  EXPECT_EQ(a.resolved->layout.dims.fsdp(), 8);
  EXPECT_NE(fixture_errors("parallel_training_7", 8, {"model.use_attn_mask_compression=false"})
                .find("Context parallel (context_parallel > 1) requires a compressed attention mask."),
            std::string::npos);
  expect_dims(load_fixture("parallel_training_8", 8), 1, 2, 4, 1, 1, 1, 8);
  EXPECT_NE(fixture_errors("parallel_training_8", 8, {"parallelism.ulysses_degree_in_cp=2"})
                .find("requires ulysses_degree_in_cp == context_parallel (4), got 2"),
            std::string::npos);
  expect_dims(load_fixture("parallel_training_9", 8), 1, 2, 4, 1, 1, 1, 8);
  EXPECT_NE(fixture_errors("parallel_training_9", 8, {"parallelism.ulysses_degree_in_cp=4"})
                .find("requires 1 < ulysses_degree_in_cp < context_parallel"),
            std::string::npos);
}

// §4.4 Scenario 1 (auto, 8 layers) and Scenario 2 (explicit, 10 layers).
TEST(SpecExamples, PipelineScenarios) {
  LoadedConfig one = load_fixture("parallel_training_10", 8);
  expect_dims(one, 1, 1, 1, 4, 2, 1, 4);
  ASSERT_EQ(one.resolved->layout.pipeline->stages.size(), 4u);
  for (int v = 0; v < 4; ++v) EXPECT_EQ(one.resolved->layout.pipeline->stages[v].layers, (LayerRange{2 * v, 2 * v + 1}));
  EXPECT_EQ(one.resolved->layout.pipeline->schedule, "interleaved_1f1b");
  EXPECT_NE(fixture_errors("parallel_training_10", 8, {"model.num_hidden_layers=10"})
                .find("Number of layers (10) is not divisible by total stages (4)."),
            std::string::npos);
  EXPECT_NE(fixture_errors("parallel_training_10", 4).find("must be less than or equal to world_size(4)"),
            std::string::npos);
  LoadedConfig two = load_fixture("parallel_training_11", 8);
  const auto& s = two.resolved->layout.pipeline->stages;
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].layers, (LayerRange{0, 1}));
  EXPECT_EQ(s[1].layers, (LayerRange{2, 3}));
  EXPECT_EQ(s[2].layers, (LayerRange{4, 8}));
  EXPECT_EQ(s[3].layers, (LayerRange{9, 9}));
}

// §5.4 Scenario A (EP <= TP) and B (EP > TP with alltoall_deredundancy).
TEST(SpecExamples, ExpertParallelScenarios) {
  expect_dims(load_fixture("parallel_training_12", 8), 1, 2, 1, 4, 1, 2, 4);
  EXPECT_NE(fixture_errors("parallel_training_12", 8, {"parallelism.expert_parallel=3"})
                .find("parallelism.expert_parallel (3) must divide dp_shard * cp * tp = 8"),
            std::string::npos);
  expect_dims(load_fixture("parallel_training_13", 16), 1, 8, 1, 2, 1, 8, 2);
  EXPECT_NE(fixture_errors("parallel_training_13", 16, {"parallelism.npu_nums_per_device=16"})
                .find("requires expert_parallel >= npu_nums_per_device, got expert_parallel 8 < npu_nums_per_device 16"),
            std::string::npos);
}

// memory_optimization.md Level 3 (recompute 0-15 + swap 16-30) and the layer+op swap scenario.
TEST(SpecExamples, MemoryCombinations) {
  EXPECT_EQ(fixture_errors("memory_optimization_5", 1), "");
  EXPECT_NE(fixture_errors("memory_optimization_5", 1, {"swap.layer_swap[0].layers=[15-30]"})
                .find("layers [15] are configured for both recompute and layer swap, which is not allowed"),
            std::string::npos);
  EXPECT_NE(fixture_errors("memory_optimization_5", 1, {"swap.layer_swap[0].layers=[16-31]"})
                .find("max layer id 31 plus prefetch 1 exceeds num_layers (32)"),
            std::string::npos);
  EXPECT_EQ(fixture_errors("memory_optimization_8", 1), "");
  EXPECT_NE(fixture_errors("memory_optimization_8", 2, {"parallelism.pipeline_parallel=2"})
                .find("swap is not supported with pipeline parallel"),
            std::string::npos);
}

// training_hyperparameters.md §1.2 (Muon), §2 (warmup fields, total_steps), §3, §4.
TEST(SpecExamples, HyperparameterExamples) {
  EXPECT_EQ(fixture_errors("training_hyperparameters_3", 1), "");
  EXPECT_NE(fixture_errors("training_hyperparameters_3", 1, {"model.multi_latent_attention=false"})
                .find("Muon optimizer only supports models with Multi-Latent Attention enabled."),
            std::string::npos);
  EXPECT_NE(fixture_errors("training_hyperparameters_3", 1, {"swap.enable=true"}).find("Muon does not support swap."),
            std::string::npos);
  EXPECT_EQ(load_fixture("training_hyperparameters_5", 1).config.lr_scheduler.extras["warmup_steps"], 100);
  EXPECT_NE(joined(load_fixture("training_hyperparameters_5", 1, {"lr_scheduler.warmup_ratio=0.1"}).warnings)
                .find("warmup_ratio wins"),
            std::string::npos);
  EXPECT_NE(fixture_errors("training_hyperparameters_7", 1, {"lr_scheduler.total_steps=900"})
                .find("lr_scheduler.total_steps: must not be set"),
            std::string::npos);
  EXPECT_EQ(load_fixture("training_hyperparameters_12", 1).resolved->layout.num_accumulation_steps, 2);
  EXPECT_EQ(load_fixture("training_hyperparameters_13", 2).resolved->layout.num_accumulation_steps, 1);
  EXPECT_NE(fixture_errors("training_hyperparameters_13", 4).find("exceeds global_batch_size"), std::string::npos);
}

// The re-flowed spec broke one comment so that a line reads "> 1 indicates faster decay."; the
// block as printed is not YAML and must fail cleanly as unreadable.
TEST(SpecExamples, DamagedPolynomialBlockIsUnreadable) {
  const std::string damaged =
      "lr_scheduler:\n  type: PolynomialWithWarmUpLR\n  learning_rate: 1.e-5\n  warmup_ratio: 0.01\n"
      "  lr_end: 1.e-7     \n\n# Decay end point\n  power: 1.0        \n\n# Polynomial power. 1.0 indicates linear, "
      "and\n\n> 1 indicates faster decay.\n";
  EXPECT_THROW(load_config_text(with_defaults(damaged), "damaged.yaml"), ConfigReadError);
}

// other_training_features.md §1 (4 accumulation steps on one device) and §2 (max_norm 0.5).
TEST(SpecExamples, OtherTrainingFeatures) {
  LoadedConfig acc = load_fixture("other_training_features_1", 1);
  EXPECT_EQ(acc.resolved->layout.num_accumulation_steps, 4);
  LoadedConfig clip = load_fixture("other_training_features_2", 1);
  EXPECT_DOUBLE_EQ(clip.config.training.max_norm, 0.5);
  EXPECT_NE(fixture_errors("other_training_features_2", 1, {"training.max_norm=0"}).find("training.max_norm: must be positive"),
            std::string::npos);
}
