// Defaults of every section (configuration.md tables, MindFormers' config.py dataclasses) and the
// per-section rules (__post_init__ checks, required `type` fields, model identity).
#include <gtest/gtest.h>

#include "config_test_util.h"

using namespace loom;
using namespace loom::config;
using namespace loom::config::testing;

TEST(Defaults, CheckpointTrainingParallelism) {
  const TrainConfig c = load("").config;
  EXPECT_TRUE(c.checkpoint.enable_save);
  EXPECT_EQ(c.checkpoint.save_path, "");
  EXPECT_EQ(c.checkpoint.save_max, 5);
  EXPECT_EQ(c.checkpoint.save_interleaved_steps, 1000);
  EXPECT_FALSE(c.checkpoint.no_save_optim);
  EXPECT_FALSE(c.checkpoint.async_save);
  EXPECT_EQ(c.checkpoint.prefix, "checkpoint");
  EXPECT_FALSE(c.checkpoint.remove_redundancy);
  EXPECT_EQ(c.checkpoint.load_path, "");
  EXPECT_FALSE(c.checkpoint.load_balanced);
  EXPECT_FALSE(c.checkpoint.no_load_optim);
  EXPECT_EQ(c.checkpoint.load_worker_number, 1);
  EXPECT_TRUE(c.checkpoint.save_global_layout_cache);
  EXPECT_EQ(c.checkpoint.reshard_worker_num, 1);

  EXPECT_EQ(c.training.steps, 1000);
  EXPECT_EQ(c.training.local_batch_size, 1);
  EXPECT_EQ(c.training.global_batch_size, 1);
  EXPECT_DOUBLE_EQ(c.training.max_norm, 1.0);
  EXPECT_EQ(c.training.seed, 42);
  EXPECT_FALSE(c.training.deterministic);
  EXPECT_FALSE(c.training.rampup_batch_size.has_value());

  const ParallelismConfig& p = c.parallelism;
  EXPECT_EQ(p.data_parallel_shard, -1);
  EXPECT_EQ(p.data_parallel_shard_strategy, "optim_grads_params");
  EXPECT_EQ(p.reshard_after_forward_policy, "default");
  EXPECT_FALSE(p.cpu_offload);
  EXPECT_TRUE(p.disable_gradient_division);
  EXPECT_FALSE(p.dense_fsdp_shard_size.has_value());
  EXPECT_EQ(p.tensor_parallel, 1);
  EXPECT_EQ(p.context_parallel, 1);
  EXPECT_EQ(p.context_parallel_method, "colossal");
  EXPECT_FALSE(p.context_parallel_async);
  EXPECT_FALSE(p.ulysses_degree_in_cp.has_value());
  EXPECT_EQ(p.context_parallel_mask_type, "causal");
  EXPECT_EQ(p.pipeline_parallel, 1);
  ASSERT_TRUE(p.pipeline_parallel_layers_per_stage.has_value());
  EXPECT_TRUE(p.pipeline_parallel_layers_per_stage->is_auto);
  EXPECT_EQ(p.pipeline_parallel_schedule, "1f1b");
  EXPECT_EQ(p.pipeline_parallel_microbatch_size, 1);
  EXPECT_EQ(p.pipeline_parallel_interleave_num, 1);
  EXPECT_FALSE(p.pipeline_parallel_overlap_p2p);
  EXPECT_FALSE(p.pipeline_parallel_overlap_b_f);
  EXPECT_FALSE(p.pipeline_parallel_enable_dxdw_split);
  EXPECT_EQ(p.pipeline_parallel_p2p_transport, "plain");
  EXPECT_FALSE(p.sequence_parallel);
  EXPECT_FALSE(p.enable_mc2);
  EXPECT_FALSE(p.enable_loss_parallel);
  EXPECT_EQ(p.expert_parallel, 1);
  EXPECT_EQ(p.npu_nums_per_device, 8);
  EXPECT_EQ(p.moe_token_dispatcher_type, "alltoall");
  EXPECT_FALSE(p.expert_parallel_async_d2h);
  EXPECT_TRUE(p.expert_parallel_use_safe_tokens);
}

TEST(Defaults, OptimizerSchedulerDatasetModel) {
  const TrainConfig c = load("").config;
  EXPECT_EQ(c.optimizer.type, "AdamW");
  EXPECT_EQ(c.optimizer.betas, (std::vector<double>{0.9, 0.95}));
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.01);
  EXPECT_FALSE(c.optimizer.weight_decay_include.has_value());
  EXPECT_FALSE(c.optimizer.weight_decay_exclude.has_value());
  EXPECT_DOUBLE_EQ(c.lr_scheduler.learning_rate, 1e-5);
  const TrainDatasetConfig& d = c.train_dataset;
  EXPECT_FALSE(d.dataloader.shuffle);
  EXPECT_EQ(d.dataloader.column_names, (std::vector<std::string>{"input_ids", "labels"}));
  EXPECT_FALSE(d.dataloader.python_multiprocessing);
  EXPECT_TRUE(d.drop_remainder);
  EXPECT_EQ(d.num_parallel_workers, 8);
  EXPECT_EQ(d.prefetch_size, 1);
  EXPECT_FALSE(d.numa_enable);
  EXPECT_FALSE(d.use_distribute_dataset);
  EXPECT_EQ(c.model.model_type, "llama");
  EXPECT_FALSE(c.model.architectures.has_value());
}

TEST(Defaults, MonitorProfilerMemoryCallbacks) {
  const TrainConfig c = load("").config;
  EXPECT_DOUBLE_EQ(c.monitor.health_checkpoint.embedding_local_norm_threshold, 100.0);
  EXPECT_DOUBLE_EQ(c.monitor.health_checkpoint.global_norm_skip_threshold, 100.0);
  EXPECT_EQ(c.monitor.health_checkpoint.global_norm_skip_time, 10);
  EXPECT_EQ(std::get<std::string>(c.monitor.train_state.local_norm), "");
  EXPECT_FALSE(c.monitor.train_state.local_loss);
  EXPECT_FALSE(std::get<bool>(c.monitor.train_state.device_norm));
  EXPECT_FALSE(c.monitor.train_state.device_loss);
  EXPECT_EQ(c.monitor.tensorboard.output_dir, "");
  EXPECT_EQ(c.monitor.tensorboard.log_interval, 1);
  EXPECT_EQ(c.monitor.tensorboard.queue_size, 1000);
  EXPECT_FALSE(c.monitor.moe_monitor.save_tokens_per_expert_interval.has_value());
  EXPECT_FALSE(c.monitor.moe_monitor.target_layers.has_value());
  EXPECT_FALSE(c.profiler.enable_profiling);
  EXPECT_EQ(c.profiler.start_step, 1);
  EXPECT_EQ(c.profiler.end_step, 1);
  EXPECT_FALSE(c.profiler.output_path.has_value());
  EXPECT_FALSE(c.profiler.profiler_rank.has_value());
  EXPECT_EQ(c.profiler.profiler_level, 0);
  EXPECT_FALSE(c.profiler.mstx);
  EXPECT_FALSE(c.profiler.profile_memory);
  EXPECT_TRUE(c.profiler.profile_cpu);
  EXPECT_TRUE(c.profiler.with_stack);
  EXPECT_EQ(c.recompute.mode, "None");
  EXPECT_FALSE(c.recompute.full_recompute_layer.has_value());
  EXPECT_FALSE(c.recompute.select_module.has_value());
  EXPECT_FALSE(c.recompute.exclude_op.has_value());
  EXPECT_FALSE(c.recompute_comm.enable);
  EXPECT_FALSE(c.swap.enable);
  EXPECT_EQ(c.swap.default_prefetch, 1);
  EXPECT_TRUE(c.callbacks.empty());
  EXPECT_FALSE(c.lora_config.has_value());
  EXPECT_FALSE(c.context.has_value());
}

TEST(Defaults, OptionalSectionsContextAndLora) {
  const TrainConfig c = load("context:\n  mode: 1\nlora_config:\n  target_modules: '.*linear_qkv'\n").config;
  ASSERT_TRUE(c.context.has_value());
  EXPECT_EQ(c.context->max_device_memory, "59GB");
  EXPECT_EQ(c.context->device_target, "Ascend");
  ASSERT_TRUE(c.lora_config.has_value());
  EXPECT_EQ(c.lora_config->lora_rank, 8);
  EXPECT_EQ(c.lora_config->lora_alpha, 16);
  EXPECT_DOUBLE_EQ(c.lora_config->lora_a_std, 0.01);
}

// configuration.md "training": "must be positive" from TrainingConfig.__post_init__.
TEST(TrainingRules, BatchSizesMustBePositive) {
  EXPECT_NE(errors("training:\n  global_batch_size: 0\n").find("training.global_batch_size in config must be positive"),
            std::string::npos);
  EXPECT_NE(errors("training:\n  local_batch_size: -2\n").find("training.local_batch_size in config must be positive"),
            std::string::npos);
}

// training_hyperparameters.md §3.2: keep max_norm positive (the reference zeroes gradients).
TEST(TrainingRules, MaxNormMustBePositive) {
  EXPECT_NE(errors("training:\n  max_norm: 0\n").find("training.max_norm: must be positive, got 0.0: 0 or a negative "
                                                      "max_norm does not disable clipping"),
            std::string::npos);
  EXPECT_NE(errors("training:\n  max_norm: -1.0\n").find("must be positive"), std::string::npos);
  EXPECT_NE(errors("training:\n  max_norm: .nan\n").find("must be positive"), std::string::npos);
  EXPECT_EQ(errors("training:\n  max_norm: 0.5\n"), "");
}

TEST(TrainingRules, StepsMustBePositive) {
  EXPECT_NE(errors("training:\n  steps: 0\n").find("training.steps: must be positive"), std::string::npos);
}

// reference trainer/dynamic_batch.py: [start_gbs > 0, increment > 0, rampup_samples >= 0].
TEST(TrainingRules, RampupBatchSize) {
  EXPECT_EQ(errors("training:\n  global_batch_size: 16\n  rampup_batch_size: [4, 4, 100]\n"), "");
  EXPECT_NE(errors("training:\n  rampup_batch_size: [4, 4]\n").find("expected 3 ints"), std::string::npos);
  EXPECT_NE(errors("training:\n  global_batch_size: 16\n  rampup_batch_size: [4, 0, 100]\n")
                .find("rampup_batch_size[1] (batch_size_increment) must be > 0, got 0."),
            std::string::npos);
  EXPECT_NE(errors("training:\n  global_batch_size: 16\n  rampup_batch_size: [4, 4, -1]\n")
                .find("rampup_batch_size[2] (rampup_samples) must be >= 0, got -1."),
            std::string::npos);
  EXPECT_NE(errors("training:\n  global_batch_size: 16\n  rampup_batch_size: [0, 4, 10]\n")
                .find("rampup_batch_size[0] start_global_batch_size(0) must be positive."),
            std::string::npos);
  EXPECT_NE(errors("training:\n  global_batch_size: 2\n  rampup_batch_size: [4, 4, 10]\n")
                .find("training.global_batch_size(2) must be >= rampup_batch_size[0] start_global_batch_size(4)."),
            std::string::npos);
  EXPECT_NE(errors("training:\n  global_batch_size: 15\n  rampup_batch_size: [4, 4, 10]\n")
                .find("(global_batch_size - start_global_batch_size)=11 must be divisible by batch_size_increment=4."),
            std::string::npos);
  EXPECT_NE(errors("training:\n  rampup_batch_size: [4, 4.0, 10]\n").find("expected int, got float 4.0"),
            std::string::npos);
}

TEST(CheckpointRules, CountsMustBePositive) {
  EXPECT_NE(errors("checkpoint:\n  save_interleaved_steps: 0\n")
                .find("checkpoint.save_interleaved_steps: must be >= 1, got 0"),
            std::string::npos);
  EXPECT_NE(errors("checkpoint:\n  save_max: 0\n").find("checkpoint.save_max: must be >= 1"), std::string::npos);
  EXPECT_NE(errors("checkpoint:\n  prefix: a/b\n").find("must be a file name prefix"), std::string::npos);
}

// reference ProfilerConfig.__post_init__ and the spec's level values.
TEST(ProfilerRules, StepsAndLevel) {
  EXPECT_NE(errors("profiler:\n  start_step: 0\n").find("profiler.start_step: must be positive, got 0"),
            std::string::npos);
  EXPECT_NE(errors("profiler:\n  start_step: 2\n  end_step: 0\n").find("profiler.end_step: must be positive"),
            std::string::npos);
  EXPECT_NE(errors("profiler:\n  start_step: 5\n  end_step: 3\n").find("start_step (5) must be <= end_step (3)"),
            std::string::npos);
  EXPECT_NE(errors("profiler:\n  profiler_level: 3\n").find("must be 0, 1 or 2, got 3"), std::string::npos);
  EXPECT_NE(errors("profiler:\n  profiler_rank: [-1]\n").find("ranks are >= 0"), std::string::npos);
  EXPECT_EQ(errors("profiler:\n  enable_profiling: true\n  start_step: 3\n  end_step: 5\n"), "");
}

TEST(MonitorRules, MoeMonitorAndTensorboard) {
  EXPECT_NE(errors("monitor:\n  moe_monitor:\n    save_tokens_per_expert_interval: 0\n").find("must be a positive int"),
            std::string::npos);
  EXPECT_NE(errors("monitor:\n  moe_monitor:\n    save_tokens_per_expert_interval: true\n").find("expected int"),
            std::string::npos);
  EXPECT_NE(errors("monitor:\n  moe_monitor:\n    target_layers: 0\n").find("the first N layers and must be > 0"),
            std::string::npos);
  EXPECT_NE(errors("monitor:\n  moe_monitor:\n    target_layers: [0, -1]\n").find("target_layers[1]: layer ids must be >= 0"),
            std::string::npos);
  EXPECT_NE(errors("monitor:\n  tensorboard:\n    log_interval: 0\n").find("must be >= 1"), std::string::npos);
}

// MindFormers' config.py: lr_scheduler.type, dataloader.type and callbacks[i].type default to None,
// which the reference's type check rejects, so they are required.
TEST(RequiredFields, SchedulerDataloaderCallbackType) {
  const std::string base = std::string(kModel);
  EXPECT_NE(raw_errors(base + kDataset).find("lr_scheduler.type: is required"), std::string::npos);
  EXPECT_NE(raw_errors(base + kScheduler).find("train_dataset.dataloader.type: is required"), std::string::npos);
  EXPECT_NE(errors("callbacks:\n  - log_interval: 3\n").find("callbacks[0].type: is required"), std::string::npos);
  EXPECT_NE(errors("train_dataset:\n  dataloader:\n    typ: X\n").find("(found 'typ'; did you mean 'type'?)"),
            std::string::npos);
}

// Loom decision (docs/configuration.md): one of model_type/architectures is enough.
TEST(RequiredFields, ModelNeedsTypeOrArchitecture) {
  EXPECT_NE(raw_errors(std::string(kDataset) + kScheduler).find("model: the model section is required"),
            std::string::npos);
  EXPECT_NE(errors("model:\n  num_hidden_layers: 4\n").find("set model.model_type"), std::string::npos);
  EXPECT_EQ(errors("model:\n  architectures: Qwen3ForCausalLM\n"), "");
  EXPECT_EQ(errors("model:\n  model_type: qwen3\n"), "");
  // HF's config.json form: a list with one name.
  EXPECT_EQ(errors("model:\n  architectures: [DeepseekV3ForCausalLM]\n"), "");
  EXPECT_NE(errors("model:\n  model_type: qwen3\n  architectures: [DeepseekV3ForCausalLM]\n")
                .find("model.model_type = \"qwen3\" and model.architectures = \"DeepseekV3ForCausalLM\" disagree"),
            std::string::npos);
  EXPECT_NE(errors("model:\n  architectures: [DeepseekV3ForCausalLM, Qwen3ForCausalLM]\n")
                .find("model.architectures must be one architecture name (or a one-element list)"),
            std::string::npos);
  const std::string w = warnings("model:\n  model_type: qwen3\n  model_tpye: x\n");
  EXPECT_NE(w.find("model.model_tpye: is passed to the model unchecked; did you mean 'model_type'?"), std::string::npos)
      << w;
}

// The model section's one reader is models::ModelArgs: its messages, at the key's position.
TEST(ModelFacts, LayerCountKeysMustAgreeAndBeInts) {
  EXPECT_NE(errors("model:\n  model_type: x\n  num_hidden_layers: '12'\n")
                .find("model.num_hidden_layers must be an integer, got \"12\""),
            std::string::npos);
  EXPECT_NE(errors("model:\n  model_type: x\n  num_hidden_layers: 12\n  num_layers: 10\n")
                .find("name the same setting with different values; keep one of them"),
            std::string::npos);
  EXPECT_EQ(errors("model:\n  model_type: x\n  num_hidden_layers: 12\n  num_layers: 12\n"), "");
}

TEST(LoraRules, RankDropoutAndRegex) {
  EXPECT_NE(errors("lora_config:\n  target_modules: ''\n").find("it is empty, so LoRA would adapt nothing"),
            std::string::npos);
  EXPECT_NE(errors("lora_config:\n  target_modules: '(unclosed'\n").find("is not a valid regular expression"),
            std::string::npos);
  EXPECT_NE(errors("lora_config:\n  target_modules: x\n  lora_rank: 0\n").find("lora_config.lora_rank: must be >= 1"),
            std::string::npos);
  EXPECT_NE(errors("lora_config:\n  target_modules: x\n  lora_dropout: 1.0\n").find("must be in [0, 1)"),
            std::string::npos);
}

TEST(DatasetRules, WorkersColumnsAndNearMisses) {
  EXPECT_NE(errors("train_dataset:\n  num_parallel_workers: 0\n  dataloader:\n    type: X\n").find("must be >= 1"),
            std::string::npos);
  EXPECT_NE(errors("train_dataset:\n  dataloader:\n    type: X\n    column_names: []\n").find("at least one column"),
            std::string::npos);
  const std::string w = warnings("train_dataset:\n  dataloader:\n    type: X\n    shufle: true\n");
  EXPECT_NE(w.find("train_dataset.dataloader.shufle: is passed to the data loader unchecked; did you mean 'shuffle'?"),
            std::string::npos);
}

TEST(ModelRules, LikelyTyposOfModelFieldsWarn) {
  const std::string w = warnings("model:\n  model_type: llama\n  num_hiden_layers: 4\n  my_custom_flag: 1\n");
  EXPECT_NE(w.find("model.num_hiden_layers: is not a model field Loom knows and is passed to the model as is; did you "
                   "mean 'num_hidden_layers'?"),
            std::string::npos)
      << w;
  EXPECT_EQ(w.find("my_custom_flag"), std::string::npos);
}
