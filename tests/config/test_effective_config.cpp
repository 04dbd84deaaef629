// The effective configuration written as YAML (docs/configuration.md): every default filled in,
// loadable again to the same text, types kept for Loom and for PyYAML readers.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "config_test_util.h"
#include "testing/temp_dir.h"

using namespace loom;
using namespace loom::config;
using namespace loom::config::testing;

namespace {

std::string fixture(const std::string& name) { return std::string(LOOM_FIXTURES_DIR) + "/config/spec/" + name; }

}  // namespace

TEST(EffectiveConfig, WritesEveryDefault) {
  const std::string y = effective_config_yaml(load("").config);
  for (const char* line : {"checkpoint:\n  enable_save: true\n", "  save_max: 5\n", "  prefix: checkpoint\n",
                           "training:\n  steps: 1000\n", "  max_norm: 1.0\n", "  rampup_batch_size: null\n",
                           "parallelism:\n  data_parallel_shard: -1\n", "  pipeline_parallel_layers_per_stage: auto\n",
                           "optimizer:\n  type: AdamW\n  betas: [0.9, 0.95]\n  eps: 1.0e-08\n",
                           "lr_scheduler:\n  type: ConstantWarmUpLR\n  learning_rate: 1.0e-05\n  warmup_steps: 0\n",
                           "    column_names: [input_ids, labels]\n", "  local_norm: \"\"\n",
                           "    queue_size: 1000\n", "recompute:\n  mode: None\n", "swap:\n  enable: false\n",
                           "callbacks: []\n"})
    EXPECT_NE(y.find(line), std::string::npos) << line << "\n---\n" << y;
  EXPECT_EQ(y.find("pipeline_parallel_microbatch_size"), std::string::npos);  // computed, not written
  EXPECT_EQ(y.find("context:"), std::string::npos);                          // optional section not given
  EXPECT_EQ(y.rfind("# Effective Loom configuration of test.yaml", 0), 0u);
}

TEST(EffectiveConfig, RoundTripsToTheSameText) {
  for (const char* name : {"configuration_1.yaml", "parallel_training_11.yaml", "memory_optimization_8.yaml",
                           "training_hyperparameters_4.yaml", "configuration_4.yaml", "configuration_12.yaml"}) {
    LoadedConfig first = load_config_checked(fixture(name));
    const std::string text = effective_config_yaml(first.config);
    LoadedConfig second = load_config_text(text, name);
    second.config.source = first.config.source;
    EXPECT_EQ(effective_config_yaml(second.config), text) << name;
  }
}

// Derived values are written as they take effect, so reloading adds no new warnings.
TEST(EffectiveConfig, ReloadingAddsNoWarnings) {
  for (const char* name : {"configuration_1.yaml", "parallel_training_10.yaml", "parallel_training_4.yaml"}) {
    LoadedConfig first = load_config_checked(fixture(name), options(8));
    LoadedConfig second = load_config_text(effective_config_yaml(first.config), "effective.yaml", options(8));
    EXPECT_EQ(second.warnings.size(), first.warnings.size()) << name << "\n" << joined(second.warnings);
  }
}

TEST(EffectiveConfig, DerivedValuesAsTheyTakeEffect) {
  const std::string y = effective_config_yaml(
      load("parallelism:\n  tensor_parallel: 2\n  pipeline_parallel: 2\n  pipeline_parallel_interleave_num: 2\n"
           "  pipeline_parallel_microbatch_size: 3\n")
          .config);
  EXPECT_NE(y.find("  sequence_parallel: true\n"), std::string::npos);
  EXPECT_NE(y.find("  pipeline_parallel_schedule: interleaved_1f1b\n"), std::string::npos);
  EXPECT_EQ(y.find("microbatch"), std::string::npos);
}

TEST(EffectiveConfig, ExtrasFollowFixedFieldsInFileOrder) {
  const std::string y = effective_config_yaml(
      load("model:\n  zeta: 1\n  model_type: qwen3\n  alpha: 2.0\n  flag: \"true\"\n  ratio: 1e-6\n").config);
  EXPECT_NE(y.find("model:\n  model_type: qwen3\n  architectures: null\n  zeta: 1\n  alpha: 2.0\n  flag: \"true\"\n"
                   "  ratio: 1.0e-06\n"),
            std::string::npos)
      << y;
}

TEST(EffectiveConfig, StringsThatLookLikeOtherTypesAreQuoted) {
  const std::string y = effective_config_yaml(
      load("model:\n  model_type: \"123\"\n  a: \"null\"\n  b: \"yes\"\n  c: \"\"\n  d: \"1e-5\"\n"
           "recompute:\n  mode: full\n  full_recompute_layer: [0-1, 5]\n")
          .config);
  for (const char* line : {"  model_type: \"123\"\n", "  a: \"null\"\n", "  b: \"yes\"\n", "  c: \"\"\n", "  d: \"1e-5\"\n",
                           "  full_recompute_layer: [0-1, \"5\"]\n"})
    EXPECT_NE(y.find(line), std::string::npos) << line << "\n" << y;
}

TEST(EffectiveConfig, OverridesAreInTheWrittenConfig) {
  const std::string y = effective_config_yaml(load("", std::nullopt, {"training.steps=20"}).config);
  EXPECT_NE(y.find("training:\n  steps: 20\n"), std::string::npos);
}

TEST(EffectiveConfig, WriteToAFile) {
  loom::testing::TempDir dir;
  const std::string path = dir.file("effective.yaml");
  const TrainConfig c = load("").config;
  write_effective_config(c, path);
  EXPECT_EQ(loom::testing::read_file(path), effective_config_yaml(c));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_THROW(write_effective_config(c, dir.file("no/such/dir/effective.yaml")), IOError);
}

// PyYAML (YAML 1.1, the reference's reader) must read the same types back.
TEST(EffectiveConfig, PyYamlReadsTheSameTypes) {
  // LOOM_PYTHON: found at configure time (cmake/LoomPython.cmake), "" when there is none.
  if (LOOM_PYTHON[0] == '\0') GTEST_SKIP() << "no python3 (LOOM_PYTHON)";
  if (std::system(LOOM_PYTHON " -c 'import yaml' >/dev/null 2>&1") != 0) GTEST_SKIP() << "no PyYAML";
  loom::testing::TempDir dir;
  const std::string path = dir.file("effective.yaml");
  write_effective_config(load_config_checked(fixture("configuration_1.yaml")).config, path);
  const std::string script =
      "import sys, yaml\n"
      "c = yaml.safe_load(open(sys.argv[1]))\n"
      "assert isinstance(c['lr_scheduler']['learning_rate'], float), c['lr_scheduler']\n"
      "assert isinstance(c['optimizer']['eps'], float)\n"
      "assert c['optimizer']['betas'] == [0.9, 0.95]\n"
      "assert c['training']['max_norm'] == 1.0 and isinstance(c['training']['steps'], int)\n"
      "assert c['recompute']['mode'] == 'None'\n"
      "assert c['checkpoint']['enable_save'] is True and c['profiler']['output_path'] is None\n"
      "assert c['model']['compute_dtype'] == 'bfloat16'\n";
  loom::testing::write_file(dir.file("check.py"), script);
  EXPECT_EQ(std::system((LOOM_PYTHON " " + dir.file("check.py") + " " + path).c_str()), 0);
}
