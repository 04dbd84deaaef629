// The reference's typing rules (MindFormers' config/utils.py check_type, BaseConfig.from_dict):
// unknown keys, bool vs int, float accepts int, lists are lists, None only for Optional, extras
// kept in file order; and every error of a file reported at once with its position.
#include <gtest/gtest.h>

#include "config_test_util.h"

using namespace loom;
using namespace loom::config;
using namespace loom::config::testing;

TEST(Typing, UnknownKeyNamesFilePathAndFix) {
  const std::string e = errors("training:\n  global_batch_sise: 8\n");
  EXPECT_EQ(e, "test.yaml:2:3: training.global_batch_sise: Unknown configuration keys for TrainingConfig: "
               "['global_batch_sise']; did you mean 'global_batch_size'?");
}

TEST(Typing, UnknownKeyWithoutCloseMatchListsTheAllowedKeys) {
  const std::string e = errors("profiler:\n  colour: red\n");
  EXPECT_NE(e.find("Unknown configuration keys for ProfilerConfig: ['colour']; allowed keys: enable_profiling, "
                   "start_step, end_step, output_path, profiler_rank, profiler_level, mstx, profile_memory, "
                   "profile_cpu, with_stack"),
            std::string::npos)
      << e;
}

TEST(Typing, UnknownKeysInEveryStrictSectionAreRejected) {
  // configuration.md: allow_extra = False sections.
  const char* sections[][2] = {{"checkpoint", "CheckpointConfig"},   {"training", "TrainingConfig"},
                               {"parallelism", "ParallelismConfig"}, {"monitor", "MonitorConfig"},
                               {"profiler", "ProfilerConfig"},       {"recompute", "RecomputeConfig"},
                               {"recompute_comm", "RecomputeCommConfig"}, {"swap", "SwapConfig"},
                               {"train_dataset", "TrainDatasetConfig"}};
  for (const auto& s : sections) {
    const std::string e = errors(std::string(s[0]) + ":\n  no_such_key: 1\n");
    EXPECT_NE(e.find(std::string("Unknown configuration keys for ") + s[1] + ": ['no_such_key']"), std::string::npos)
        << s[0] << ": " << e;
  }
  EXPECT_NE(errors("monitor:\n  tensorboard:\n    logdir: x\n").find("Unknown configuration keys for TensorboardConfig"),
            std::string::npos);
  EXPECT_NE(errors("monitor:\n  moe_monitor:\n    interval: 3\n").find("Unknown configuration keys for MoeMonitorConfig"),
            std::string::npos);
}

TEST(Typing, ExtrasOfOpenSectionsAreKeptInFileOrderWithTheirTypes) {
  // configuration.md: optimizer, lr_scheduler, dataloader, model, callbacks allow extra keys.
  LoadedConfig c = load(
      "model:\n  model_type: llama\n  zed: 1\n  alpha: 1.0\n  flag: true\n  name: x\n  dims: [1, 2]\n"
      "  rope: {type: yarn, factor: 40}\n  nothing: null\n"
      "optimizer:\n  type: AdamW\n  use_fused: true\n"
      "callbacks:\n  - type: MyCallback\n    log_interval: 10\n");
  const Json& m = c.config.model.extras;
  std::vector<std::string> keys;
  for (auto it = m.begin(); it != m.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"zed", "alpha", "flag", "name", "dims", "rope", "nothing"}));
  EXPECT_TRUE(m["zed"].is_number_integer());
  EXPECT_TRUE(m["alpha"].is_number_float());
  EXPECT_TRUE(m["flag"].is_boolean());
  EXPECT_TRUE(m["name"].is_string());
  EXPECT_TRUE(m["dims"].is_array());
  EXPECT_EQ(m["rope"]["factor"], 40);
  EXPECT_TRUE(m["nothing"].is_null());
  EXPECT_EQ(c.config.optimizer.extras["use_fused"], true);
  ASSERT_EQ(c.config.callbacks.size(), 1u);
  EXPECT_EQ(c.config.callbacks[0].type, "MyCallback");
  EXPECT_EQ(c.config.callbacks[0].extras["log_interval"], 10);
  EXPECT_EQ(c.config.lr_scheduler.extras["warmup_steps"], 0);
}

TEST(Typing, TopLevelExtrasAreKept) {
  LoadedConfig c = load("run_name: demo\n");
  EXPECT_EQ(c.config.extras["run_name"], "demo");
}

TEST(Typing, BoolIsNotAnInt) {
  EXPECT_EQ(errors("training:\n  steps: true\n"),
            "test.yaml:2:10: training.steps: expected int, got bool true; a bool is not a number here");
  EXPECT_NE(errors("training:\n  max_norm: false\n").find("expected float, got bool false"), std::string::npos);
}

TEST(Typing, IntIsNotABool) {
  EXPECT_EQ(errors("training:\n  deterministic: 1\n"), "test.yaml:2:18: training.deterministic: expected bool, got int 1");
  // YAML 1.1 words are strings here; the message says what to write.
  EXPECT_NE(errors("swap:\n  enable: yes\n").find("expected bool, got str 'yes'; write true or false"),
            std::string::npos);
}

TEST(Typing, FloatAcceptsInt) {
  LoadedConfig c = load("training:\n  max_norm: 2\noptimizer:\n  weight_decay: 0\n");
  EXPECT_DOUBLE_EQ(c.config.training.max_norm, 2.0);
  // The reference rejects an int weight_decay (QUIRK, docs/optimizers.md); float accepts int here.
  EXPECT_DOUBLE_EQ(c.config.optimizer.weight_decay, 0.0);
}

TEST(Typing, IntRejectsFloatAndSaysHow) {
  EXPECT_NE(errors("training:\n  steps: 10.0\n").find("expected int, got float 10.0; write it without a decimal point"),
            std::string::npos);
  EXPECT_NE(errors("training:\n  steps: 1e3\n").find("expected int, got float 1000.0"), std::string::npos);
}

TEST(Typing, QuotedNumbersAreStrings) {
  EXPECT_NE(errors("training:\n  global_batch_size: \"8\"\n").find("expected int, got str '8' (quoted, so a string); "
                                                                    "remove the quotes"),
            std::string::npos);
}

TEST(Typing, StringFieldsRejectNumbers) {
  EXPECT_NE(errors("checkpoint:\n  save_path: 123\n").find("checkpoint.save_path: expected str, got int 123"),
            std::string::npos);
}

TEST(Typing, NoneIsRejectedForNonOptionalFields) {
  EXPECT_EQ(errors("training:\n  steps: null\n"),
            "test.yaml:2:3: training.steps: expected int, got null; this field cannot be None: delete the key to use "
            "the default (1000)");
  EXPECT_NE(errors("training:\n  steps:\n").find("cannot be None"), std::string::npos);
}

TEST(Typing, NoneIsAcceptedForOptionalFields) {
  LoadedConfig c = load("checkpoint:\n  prefix: null\nprofiler:\n  output_path: ~\n  profiler_rank: null\n");
  EXPECT_FALSE(c.config.checkpoint.prefix.has_value());
  EXPECT_FALSE(c.config.profiler.output_path.has_value());
  EXPECT_FALSE(c.config.profiler.profiler_rank.has_value());
}

TEST(Typing, ListsMustBeLists) {
  EXPECT_NE(errors("optimizer:\n  betas: 0.9\n").find("optimizer.betas: expected List[float], got float 0.9"),
            std::string::npos);
  EXPECT_NE(errors("optimizer:\n  betas: [0.9, x]\n").find("optimizer.betas[1]: expected float, got str 'x'"),
            std::string::npos);
  EXPECT_NE(errors("train_dataset:\n  dataloader:\n    type: X\n    column_names: input_ids\n")
                .find("expected List[str], got str 'input_ids'"),
            std::string::npos);
}

TEST(Typing, SectionMustBeAMapping) {
  EXPECT_EQ(errors("training: 5\n"), "test.yaml:1:11: training: expected a mapping of TrainingConfig fields, got int 5");
  EXPECT_NE(errors("training:\n").find("training: expected a mapping of TrainingConfig fields, got null; write its "
                                       "fields indented under it"),
            std::string::npos);
  EXPECT_NE(errors("callbacks: {type: X}\n").find("callbacks: expected List[CallbackConfig], got map"),
            std::string::npos);
}

TEST(Typing, UnionFieldsAcceptEachArm) {
  // train_state.local_norm: Union[bool, str, List[str]]; moe_monitor.target_layers: Union[int, List[int]].
  LoadedConfig c = load("monitor:\n  train_state:\n    local_norm: [embedding, output]\n    device_norm: true\n"
                        "  moe_monitor:\n    target_layers: 3\n");
  EXPECT_EQ(std::get<std::vector<std::string>>(c.config.monitor.train_state.local_norm).size(), 2u);
  EXPECT_TRUE(std::get<bool>(c.config.monitor.train_state.device_norm));
  EXPECT_EQ(std::get<std::int64_t>(*c.config.monitor.moe_monitor.target_layers), 3);
  EXPECT_NE(errors("monitor:\n  train_state:\n    local_norm: 3\n")
                .find("expected Union[bool, str, List[str]], got int 3"),
            std::string::npos);
}

TEST(Typing, TensorboardAcceptsCurrentAndOldNames) {
  LoadedConfig now = load("monitor:\n  tensorboard:\n    output_dir: tb\n    log_interval: 5\n    queue_size: 10\n");
  EXPECT_EQ(now.config.monitor.tensorboard.output_dir, "tb");
  EXPECT_EQ(now.config.monitor.tensorboard.log_interval, 5);
  LoadedConfig old = load(
      "monitor:\n  tensorboard:\n    tensorboard_dir: tb2\n    tensorboard_log_interval: 7\n"
      "    tensorboard_queue_size: 11\n");
  EXPECT_EQ(old.config.monitor.tensorboard.output_dir, "tb2");
  EXPECT_EQ(old.config.monitor.tensorboard.log_interval, 7);
  EXPECT_EQ(old.config.monitor.tensorboard.queue_size, 11);
  EXPECT_TRUE(old.config.is_explicit("monitor.tensorboard.output_dir"));
  EXPECT_NE(errors("monitor:\n  tensorboard:\n    output_dir: a\n    tensorboard_dir: b\n")
                .find("'tensorboard_dir' is the older name of 'output_dir'; set only one of them"),
            std::string::npos);
}

TEST(Typing, IntOutOfRangeForAnIntField) {
  EXPECT_NE(errors("parallelism:\n  tensor_parallel: 4294967296\n").find("is out of range"), std::string::npos);
}

TEST(Typing, ExplicitFieldsAreRecorded) {
  LoadedConfig c = load("parallelism:\n  tensor_parallel: 1\n");
  EXPECT_TRUE(c.config.is_explicit("parallelism.tensor_parallel"));
  EXPECT_TRUE(c.config.is_explicit("parallelism"));
  EXPECT_FALSE(c.config.is_explicit("parallelism.sequence_parallel"));
}

TEST(Typing, AllErrorsOfAFileAreReportedTogether) {
  const std::string e = errors(
      "training:\n  steps: x\n  global_batch_size: 0\n"
      "parallelism:\n  tensor_paralel: 2\n"
      "recompute:\n  mode: sometimes\n");
  EXPECT_NE(e.find("test.yaml:2:10: training.steps: expected int"), std::string::npos) << e;
  EXPECT_NE(e.find("test.yaml:3:22: training.global_batch_size: training.global_batch_size in config must be positive"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("test.yaml:5:3: parallelism.tensor_paralel: Unknown configuration keys for ParallelismConfig: "
                   "['tensor_paralel']; did you mean 'tensor_parallel'?"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("test.yaml:7:9: recompute.mode: must be \"None\", \"full\" or \"select\", got 'sometimes'"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("(4 configuration errors in test.yaml)"), std::string::npos) << e;
  EXPECT_EQ(count(e, "\n"), 4);  // one line per error, then the count
}

TEST(Typing, TopLevelTypoOfASectionNameIsAnError) {
  // The reference keeps unknown top-level keys; a near-miss of a section would drop the section.
  const std::string e = errors("trainig:\n  steps: 5\n");
  EXPECT_EQ(e, "test.yaml:1:1: trainig: 'trainig' is not a section; did you mean 'training'? (as written, the whole "
               "section would be ignored)");
}

TEST(Typing, TopLevelFieldOfASectionWarnsAboutIndentation) {
  const std::string w = warnings("seed: 3\n");
  EXPECT_NE(w.find("test.yaml:1:1: seed: a top-level 'seed' is ignored; it is a field of the training section: "
                   "indent it under 'training:'"),
            std::string::npos)
      << w;
}

// other_training_features.md printed its YAML without indentation; read literally, the section
// is empty and its fields land at the top level.
TEST(Typing, FlattenedSpecBlockIsExplained) {
  const std::string e = errors("training:\nsteps: 1000\nlocal_batch_size: 2\n");
  EXPECT_NE(e.find("training: expected a mapping of TrainingConfig fields, got null; write its fields indented under it"),
            std::string::npos)
      << e;
}

TEST(Typing, FieldInTheWrongSectionNamesItsSection) {
  EXPECT_EQ(errors("training:\n  tensor_parallel: 2\n"),
            "test.yaml:2:3: training.tensor_parallel: Unknown configuration keys for TrainingConfig: "
            "['tensor_parallel']; 'tensor_parallel' is a field of the parallelism section: move it there");
}
