// The configuration resolved once (config/resolved_config.h): resolve_config gives what loading
// gave, the model section has one reader whose problems are reported once at their line, a rule
// is reported once, and what keeps a valid file from training stops only the run.
#include <gtest/gtest.h>

#include "config_test_util.h"

using namespace loom;
using namespace loom::config;
using namespace loom::config::testing;

namespace {

// A configuration `loom train` can run: a complete model and dataset.
const std::string kRunnable =
    "training:\n  global_batch_size: 16\n  local_batch_size: 2\n"
    "parallelism:\n  data_parallel_shard: 2\n"
    "recompute:\n  mode: select\n  full_recompute_layer: ['0']\n  select_module:\n    '.*mlp': ['1']\n"
    "swap:\n  enable: true\n  layer_swap:\n    - layers: ['2']\n"
    "train_dataset:\n  dataloader:\n    type: BlendedMegatronDatasetDataLoader\n    sizes: [100, 0, 0]\n"
    "    config:\n      seq_length: 16\n      split: '1,0,0'\n      data_path: [/data/tokens]\n"
    "  num_parallel_workers: 1\n"
    "model:\n  model_type: llama\n  vocab_size: 64\n  hidden_size: 32\n  intermediate_size: 64\n"
    "  num_hidden_layers: 4\n  num_attention_heads: 4\n  num_key_value_heads: 2\n  seq_length: 16\n";

void expect_same(const ResolvedConfig& a, const ResolvedConfig& b) {
  const auto& x = a.layout;
  const auto& y = b.layout;
  EXPECT_EQ(x.world_size, y.world_size);
  EXPECT_EQ(x.dims.dp_replicate(), y.dims.dp_replicate());
  EXPECT_EQ(x.dims.dp_shard(), y.dims.dp_shard());
  EXPECT_EQ(x.dims.tp(), y.dims.tp());
  EXPECT_EQ(x.samples_per_micro_step, y.samples_per_micro_step);
  EXPECT_EQ(x.num_accumulation_steps, y.num_accumulation_steps);
  EXPECT_EQ(x.samples_per_step, y.samples_per_step);
  ASSERT_EQ(x.pipeline.has_value(), y.pipeline.has_value());
  if (x.pipeline) {
    EXPECT_EQ(x.pipeline->stages.size(), y.pipeline->stages.size());
  }
  EXPECT_EQ(a.recompute.mode, b.recompute.mode);
  EXPECT_EQ(a.recompute.full_layers, b.recompute.full_layers);
  ASSERT_EQ(a.recompute.select.size(), b.recompute.select.size());
  for (std::size_t i = 0; i < a.recompute.select.size(); ++i) {
    EXPECT_EQ(a.recompute.select[i].pattern, b.recompute.select[i].pattern);
    EXPECT_EQ(a.recompute.select[i].layers, b.recompute.select[i].layers);
  }
  EXPECT_EQ(a.swap.enable, b.swap.enable);
  EXPECT_EQ(a.swap.layers, b.swap.layers);
  EXPECT_EQ(a.swap.prefetch, b.swap.prefetch);
  EXPECT_EQ(a.model_args().num_layers, b.model_args().num_layers);
  EXPECT_EQ(a.model_args().num_key_value_heads, b.model_args().num_key_value_heads);
  EXPECT_EQ(a.model_args().head_dim, b.model_args().head_dim);
  EXPECT_EQ(a.loader_options().config.seq_length, b.loader_options().config.seq_length);
  EXPECT_EQ(a.loader_options().config.data_path, b.loader_options().config.data_path);
  EXPECT_EQ(a.loader_options().sizes, b.loader_options().sizes);
  EXPECT_EQ(a.gaps, b.gaps);
}

std::string resolve_errors(const TrainConfig& config, int world) {
  try {
    resolve_config(config, world);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// What `loom train` and `loom check-config` get from loading is what resolve_config gives, value
// for value: the layout, the memory options, the model arguments and the loader options.
TEST(ResolvedConfig, ResolveConfigGivesWhatLoadingResolved) {
  LoadedConfig loaded = load(kRunnable, 8);
  ASSERT_TRUE(loaded.resolved.has_value());
  const ResolvedConfig& r = *loaded.resolved;
  EXPECT_TRUE(r.gaps.empty());
  EXPECT_EQ(r.layout.dims.dp_replicate(), 4);
  EXPECT_EQ(r.layout.dims.dp_shard(), 2);
  EXPECT_EQ(r.layout.num_accumulation_steps, 1);  // 16 // (8 * 2)
  EXPECT_EQ(r.recompute.mode, memory::RecomputeOptions::Mode::select);
  EXPECT_EQ(r.recompute.full_layers, (std::set<std::int64_t>{0}));
  ASSERT_EQ(r.recompute.select.size(), 1u);
  EXPECT_EQ(r.recompute.select[0].layers, (std::set<std::int64_t>{1}));
  EXPECT_EQ(r.swap.layers, (std::set<std::int64_t>{2}));
  EXPECT_EQ(r.model_args().model_type, "llama");
  EXPECT_EQ(r.model_args().num_key_value_heads, 2);
  EXPECT_EQ(r.model_args().head_dim, 8);
  EXPECT_EQ(r.loader_options().config.seq_length, 16);
  EXPECT_EQ(r.loader_options().num_parallel_workers, 1);
  expect_same(resolve_config(loaded.config, 8), r);
  // On another world size only the layout differs.
  const ResolvedConfig two = resolve_config(loaded.config, 2);
  EXPECT_EQ(two.layout.dims.dp_replicate(), 1);
  EXPECT_EQ(two.layout.num_accumulation_steps, 4);
  EXPECT_EQ(two.swap.layers, r.swap.layers);
}

// A configuration keeps the positions of its values: a resolution after loading still points at
// the line.
TEST(ResolvedConfig, PositionsSurviveLoading) {
  LoadedConfig loaded = load(kRunnable);
  EXPECT_FALSE(loaded.resolved.has_value());  // no world size, no layout
  const std::string e = resolve_errors(loaded.config, 16);
  EXPECT_EQ(e, "test.yaml:2:22: training.global_batch_size: The product of data_parallel and local_batch_size "
               "exceeds global_batch_size, please increase global_batch_size or decrease local_batch_size. "
               "(data_parallel 16 x local_batch_size 2 = 32 > global_batch_size 16)");
}

// The model section has one reader (models::ModelArgs): an ill-typed key is one error, with its
// position, in the reader's words; an unknown key is one warning or one note, never both.
TEST(ResolvedConfig, AModelKeyIsReportedOnceAtItsLine) {
  const std::string bad = std::string(kRunnable).replace(kRunnable.find("num_attention_heads: 4"), 22,
                                                          "num_attention_heads: four");
  const std::string e = errors(bad, 1);
  EXPECT_EQ(count(e, "num_attention_heads"), 1) << e;
  EXPECT_NE(e.find("test.yaml:30:24: model.num_attention_heads must be an integer, got \"four\""), std::string::npos) << e;

  const std::string typo = kRunnable + "  num_key_value_head: 2\n  my_custom_flag: 1\n";
  LoadedConfig c = load(typo, 1);
  const std::string w = joined(c.warnings), n = joined(c.notes);
  EXPECT_EQ(count(w + n, "num_key_value_head:"), 1) << w << n;
  EXPECT_NE(w.find("test.yaml:33:3: model.num_key_value_head: is not a model field Loom knows and is passed to the "
                   "model as is; did you mean 'num_key_value_heads'?"),
            std::string::npos)
      << w;
  EXPECT_EQ(count(w + n, "my_custom_flag"), 1) << w << n;
  EXPECT_NE(n.find("test.yaml:34:3: model.my_custom_flag: no field of the llama model reads this key; it is ignored"),
            std::string::npos)
      << n;
  // The resolved arguments carry it as unknown; no other layer reads the section to report it again.
  EXPECT_EQ(c.resolved->model_args().unknown_keys, (std::vector<std::string>{"num_key_value_head", "my_custom_flag"}));
}

// Each rule is checked in one place: a degree below 1 is one error at its field (the world-size
// rules take checked degrees), a memory rule one error, a world-size rule one error.
TEST(ResolvedConfig, ARuleViolatedIsReportedOnce) {
  const std::string degree = errors("parallelism:\n  tensor_parallel: 0\n", 1);
  EXPECT_EQ(degree, "test.yaml:2:20: parallelism.tensor_parallel: must be >= 1, got 0");
  const std::string ep = errors("parallelism:\n  expert_parallel: 0\n", 4);
  EXPECT_EQ(ep, "test.yaml:2:20: parallelism.expert_parallel: must be >= 1, got 0");
  const std::string full = errors("recompute:\n  mode: full\n", 1);
  EXPECT_EQ(count(full, "full_recompute_layer"), 2) << full;  // the path and the message, one line
  EXPECT_EQ(count(full, "\n"), 0) << full;
  const std::string world = errors("parallelism:\n  tensor_parallel: 2\n  pipeline_parallel: 2\n", 2);
  EXPECT_EQ(world, "test.yaml:1:1: parallelism: tensor_parallel(2) * pipeline_parallel(2) * context_parallel(1) must "
                   "be less than or equal to world_size(2).");
}

// A valid file need not describe a model and dataset Loom can build: loading (check-config)
// accepts it, and the run stops on every gap, each at its line.
TEST(ResolvedConfig, GapsStopTheRunNotTheFile) {
  LoadedConfig c = load("model:\n  model_type: llama\n  num_hidden_layers: 4\n", 1);
  ASSERT_TRUE(c.resolved.has_value());
  EXPECT_FALSE(c.resolved->model.has_value());
  EXPECT_FALSE(c.resolved->loader.has_value());
  ASSERT_EQ(c.resolved->gaps.size(), 5u);
  EXPECT_EQ(c.resolved->gaps[0], "test.yaml:2:3: model.vocab_size is required for model_type llama; add it to the "
                                 "model section (the HF config.json value)");
  EXPECT_EQ(c.resolved->gaps[4], "test.yaml:6:5: train_dataset.dataloader.config is required (seq_length, data_path, "
                                 "split, ...)");
  std::string from_args;
  try {
    c.resolved->model_args();
  } catch (const ConfigError& e) {
    from_args = e.what();
  }
  EXPECT_EQ(from_args, resolve_errors(c.config, 1));
  EXPECT_THROW(c.resolved->require_runnable(), ConfigError);
  EXPECT_NO_THROW(load(kRunnable, 1).resolved->require_runnable());
  EXPECT_NE(from_args.find("(5 configuration errors in test.yaml)"), std::string::npos) << from_args;
  EXPECT_EQ(resolve_errors(load(kRunnable).config, 1), "");
}

// The sequence length is one value (ResolvedConfig::seq_length) that every rule and the run read:
// the dataset's, whose samples the model is fed, else the model's (spec configuration.md gives
// seq_length in both train_dataset.dataloader.config and the model's pass-through keys).
TEST(ResolvedConfig, SequenceLengthIsOneValue) {
  EXPECT_EQ(load(kRunnable, 1).resolved->seq_length, 16);
  // Two lengths: the parallel rules would judge one and the run train on the other.
  const std::string e = errors(kRunnable, 1, {"model.seq_length=32"});
  EXPECT_NE(e.find("test.yaml:20:19: train_dataset.dataloader.config.seq_length: is 16 but model.seq_length is 32; the "
                   "model is fed the dataset's samples, so both must give the same length: write one value in "
                   "both, or delete model.seq_length"),
            std::string::npos)
      << e;
  // One length given, in either place, is the length.
  std::string model_only = kRunnable;
  model_only.erase(model_only.find("      seq_length: 16\n"), std::string("      seq_length: 16\n").size());
  LoadedConfig m = load(model_only, 1);
  EXPECT_EQ(m.resolved->seq_length, 16);
  std::string data_only = kRunnable;
  data_only.erase(data_only.rfind("  seq_length: 16\n"));
  EXPECT_EQ(load(data_only + "\n", 1).resolved->seq_length, 16);
  // The context-parallel rule reads the resolved length: the model's 18 when the dataset gives none.
  EXPECT_NE(errors(model_only, 1, {"model.seq_length=18", "parallelism.context_parallel=2",
                                   "parallelism.data_parallel_shard=1"})
                .find("seq_length 18 must be divisible by 2 * context_parallel (4)"),
            std::string::npos);
}
