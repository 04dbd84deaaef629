// The typed configuration: one struct per YAML section with every field, type and default of the
// spec (configuration.md) and of the reference dataclasses (MindFormers'
// pynative/config/config.py). Each struct lists its fields once, in `visit`, which drives reading,
// writing and messages. Sections that allow extra keys keep them in `extras`, in file order, as
// JSON, for the layer that consumes them (model, optimizer, scheduler, dataloader, callbacks).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "loom/config/config_node.h"

namespace loom::config {

// A list of layer specs as written: '5', '0-3' (YAML ints are kept as their text).
// Parse them with parse_layer_specs (layer_spec.h).
struct LayerSpecs {
  std::vector<std::string> specs;
  bool operator==(const LayerSpecs&) const = default;
};

// `select_module` of recompute/recompute_comm: regex over module paths -> layer specs, in file order.
struct ModuleSelection {
  std::string pattern;
  LayerSpecs layers;
};
struct ModuleSelectMap {
  std::vector<ModuleSelection> entries;
};

// parallelism.pipeline_parallel_layers_per_stage: "auto", or one string per PP rank with
// pipeline_parallel_interleave_num comma-separated chunks ("0-1, 4-8").
struct PipelineLayersPerStage {
  bool is_auto = true;
  std::vector<std::string> stages;
  // The reference also types a List[List[int]] form it never documents; it is read so the
  // message can say what to write instead.
  std::vector<std::vector<std::int64_t>> nested_ints;
};

struct CheckpointConfig {
  static constexpr const char* kClassName = "CheckpointConfig";
  static constexpr bool kAllowExtra = false;
  bool enable_save = true;
  std::string save_path;
  std::int64_t save_max = 5;
  std::int64_t save_interleaved_steps = 1000;
  bool no_save_optim = false;
  bool async_save = false;
  std::optional<std::string> prefix = "checkpoint";
  bool remove_redundancy = false;
  std::string load_path;
  bool load_balanced = false;
  bool no_load_optim = false;
  std::int64_t load_worker_number = 1;
  bool save_global_layout_cache = true;
  std::int64_t reshard_worker_num = 1;

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("enable_save", s.enable_save);
    v("save_path", s.save_path);
    v("save_max", s.save_max);
    v("save_interleaved_steps", s.save_interleaved_steps);
    v("no_save_optim", s.no_save_optim);
    v("async_save", s.async_save);
    v("prefix", s.prefix);
    v("remove_redundancy", s.remove_redundancy);
    v("load_path", s.load_path);
    v("load_balanced", s.load_balanced);
    v("no_load_optim", s.no_load_optim);
    v("load_worker_number", s.load_worker_number);
    v("save_global_layout_cache", s.save_global_layout_cache);
    v("reshard_worker_num", s.reshard_worker_num);
  }
};

struct TrainingConfig {
  static constexpr const char* kClassName = "TrainingConfig";
  static constexpr bool kAllowExtra = false;
  std::int64_t steps = 1000;
  std::int64_t local_batch_size = 1;
  std::int64_t global_batch_size = 1;
  double max_norm = 1.0;
  std::int64_t seed = 42;
  bool deterministic = false;
  // [start_global_batch_size, batch_size_increment, rampup_samples]
  std::optional<std::vector<std::int64_t>> rampup_batch_size;
  // Loom extensions (the spec has no validation fields; Megatron's --eval-interval and
  // --eval-iters): evaluate the validation split every eval_interval optimizer steps (0: never)
  // and after the last, on its first eval_iters global batches (-1: the whole split).
  std::int64_t eval_interval = 0;
  std::int64_t eval_iters = 10;
  // Loom extensions (llm.c prints samples while it trains): every sample_interval steps (0:
  // never) and after the last, the greedy continuation of each of sample_prompts, tokenized with
  // sample_tokenizer, sample_max_new_tokens tokens long.
  std::int64_t sample_interval = 0;
  std::vector<std::string> sample_prompts;
  std::int64_t sample_max_new_tokens = 32;
  std::string sample_tokenizer;

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("steps", s.steps);
    v("local_batch_size", s.local_batch_size);
    v("global_batch_size", s.global_batch_size);
    v("max_norm", s.max_norm);
    v("seed", s.seed);
    v("deterministic", s.deterministic);
    v("rampup_batch_size", s.rampup_batch_size);
    v("eval_interval", s.eval_interval);
    v("eval_iters", s.eval_iters);
    v("sample_interval", s.sample_interval);
    v("sample_prompts", s.sample_prompts);
    v("sample_max_new_tokens", s.sample_max_new_tokens);
    v("sample_tokenizer", s.sample_tokenizer);
  }
};

struct ParallelismConfig {
  static constexpr const char* kClassName = "ParallelismConfig";
  static constexpr bool kAllowExtra = false;
  int data_parallel_shard = -1;
  std::string data_parallel_shard_strategy = "optim_grads_params";
  std::string reshard_after_forward_policy = "default";
  bool cpu_offload = false;
  bool disable_gradient_division = true;
  std::optional<int> dense_fsdp_shard_size;
  int tensor_parallel = 1;
  int context_parallel = 1;
  std::string context_parallel_method = "colossal";
  bool context_parallel_async = false;
  std::optional<int> ulysses_degree_in_cp;
  std::string context_parallel_mask_type = "causal";
  // Loom extension (the spec has no field for the split): true cuts each sequence into
  // 2·context_parallel chunks and gives cp rank r chunks r and 2·cp-1-r, so every rank has the
  // same causal attention work; false gives rank r the contiguous 1/cp (the reference's split).
  bool context_parallel_load_balance = true;
  int pipeline_parallel = 1;
  std::optional<PipelineLayersPerStage> pipeline_parallel_layers_per_stage = PipelineLayersPerStage{};
  std::string pipeline_parallel_schedule = "1f1b";
  int pipeline_parallel_microbatch_size = 1;  // overwritten with num_accumulation_steps
  int pipeline_parallel_interleave_num = 1;
  bool pipeline_parallel_overlap_p2p = false;
  bool pipeline_parallel_overlap_b_f = false;
  bool pipeline_parallel_enable_dxdw_split = false;
  std::string pipeline_parallel_p2p_transport = "plain";
  bool sequence_parallel = false;  // implied by tensor_parallel > 1
  bool enable_mc2 = false;
  bool enable_loss_parallel = false;
  int expert_parallel = 1;
  int npu_nums_per_device = 8;
  std::string moe_token_dispatcher_type = "alltoall";
  bool expert_parallel_async_d2h = false;
  bool expert_parallel_use_safe_tokens = true;

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("data_parallel_shard", s.data_parallel_shard);
    v("data_parallel_shard_strategy", s.data_parallel_shard_strategy);
    v("reshard_after_forward_policy", s.reshard_after_forward_policy);
    v("cpu_offload", s.cpu_offload);
    v("disable_gradient_division", s.disable_gradient_division);
    v("dense_fsdp_shard_size", s.dense_fsdp_shard_size);
    v("tensor_parallel", s.tensor_parallel);
    v("context_parallel", s.context_parallel);
    v("context_parallel_method", s.context_parallel_method);
    v("context_parallel_async", s.context_parallel_async);
    v("ulysses_degree_in_cp", s.ulysses_degree_in_cp);
    v("context_parallel_mask_type", s.context_parallel_mask_type);
    v("context_parallel_load_balance", s.context_parallel_load_balance);
    v("pipeline_parallel", s.pipeline_parallel);
    v("pipeline_parallel_layers_per_stage", s.pipeline_parallel_layers_per_stage);
    v("pipeline_parallel_schedule", s.pipeline_parallel_schedule);
    v("pipeline_parallel_microbatch_size", s.pipeline_parallel_microbatch_size);
    v("pipeline_parallel_interleave_num", s.pipeline_parallel_interleave_num);
    v("pipeline_parallel_overlap_p2p", s.pipeline_parallel_overlap_p2p);
    v("pipeline_parallel_overlap_b_f", s.pipeline_parallel_overlap_b_f);
    v("pipeline_parallel_enable_dxdw_split", s.pipeline_parallel_enable_dxdw_split);
    v("pipeline_parallel_p2p_transport", s.pipeline_parallel_p2p_transport);
    v("sequence_parallel", s.sequence_parallel);
    v("enable_mc2", s.enable_mc2);
    v("enable_loss_parallel", s.enable_loss_parallel);
    v("expert_parallel", s.expert_parallel);
    v("npu_nums_per_device", s.npu_nums_per_device);
    v("moe_token_dispatcher_type", s.moe_token_dispatcher_type);
    v("expert_parallel_async_d2h", s.expert_parallel_async_d2h);
    v("expert_parallel_use_safe_tokens", s.expert_parallel_use_safe_tokens);
  }
};

// The `optimizer:` and `lr_scheduler:` sections belong to optim, which knows the optimizers and
// schedulers, their keys, defaults and rules (optim::read_optimizer_section,
// optim::read_lr_scheduler). `section` is the section as written (file order, overrides applied):
// what config checks through optim and what the trainer builds from. The typed fields are the
// reference dataclass's, filled from what optim read (the values the run uses: Muon's own eps and
// weight_decay when type is Muon); `extras` holds the other keys as written.
struct OptimizerConfig {
  static constexpr const char* kClassName = "OptimizerConfig";
  static constexpr bool kAllowExtra = true;
  std::string type = "AdamW";
  std::vector<double> betas = {0.9, 0.95};
  double eps = 1.0e-8;
  double weight_decay = 0.01;
  std::optional<std::vector<std::string>> weight_decay_include;
  std::optional<std::vector<std::string>> weight_decay_exclude;
  Json extras = Json::object();  // optimizer-specific keyword arguments (Muon: momentum, ...)
  Json section = Json::object();

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("type", s.type);
    v("betas", s.betas);
    v("eps", s.eps);
    v("weight_decay", s.weight_decay);
    v("weight_decay_include", s.weight_decay_include);
    v("weight_decay_exclude", s.weight_decay_exclude);
  }
};

struct LrSchedulerConfig {
  static constexpr const char* kClassName = "LrSchedulerConfig";
  static constexpr bool kAllowExtra = true;
  std::string type;  // required; canonical class name after loading (aliases resolved)
  double learning_rate = 1e-5;
  Json extras = Json::object();  // warmup_steps, warmup_ratio, lr_end, ... (total_steps is injected)
  Json section = Json::object();  // as written: see OptimizerConfig

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("type", s.type);
    v("learning_rate", s.learning_rate);
  }
};

struct DataloaderConfig {
  static constexpr const char* kClassName = "DataloaderConfig";
  static constexpr bool kAllowExtra = true;
  std::string type;  // required
  bool shuffle = false;
  std::vector<std::string> column_names = {"input_ids", "labels"};
  bool python_multiprocessing = false;
  Json extras = Json::object();  // datasets_type, sizes, config: {seq_length, data_path, ...}

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("type", s.type);
    v("shuffle", s.shuffle);
    v("column_names", s.column_names);
    v("python_multiprocessing", s.python_multiprocessing);
  }
};

struct TrainDatasetConfig {
  static constexpr const char* kClassName = "TrainDatasetConfig";
  static constexpr bool kAllowExtra = false;
  DataloaderConfig dataloader;
  bool drop_remainder = true;
  int num_parallel_workers = 8;
  int prefetch_size = 1;
  bool numa_enable = false;
  bool use_distribute_dataset = false;

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("dataloader", s.dataloader);
    v("drop_remainder", s.drop_remainder);
    v("num_parallel_workers", s.num_parallel_workers);
    v("prefetch_size", s.prefetch_size);
    v("numa_enable", s.numa_enable);
    v("use_distribute_dataset", s.use_distribute_dataset);
  }
};

struct ModelConfig {
  static constexpr const char* kClassName = "ModelConfig";
  static constexpr bool kAllowExtra = true;
  std::optional<std::string> model_type;     // at least one of model_type/architectures
  // is required (see docs/configuration.md); HF's config.json form, a one-element list, is accepted too.
  std::optional<std::variant<std::string, std::vector<std::string>>> architectures;
  Json extras = Json::object();              // structure hyper-parameters, HF or MF names

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("model_type", s.model_type);
    v("architectures", s.architectures);
  }
};

struct HealthCheckpointConfig {
  static constexpr const char* kClassName = "HealthCheckpointConfig";
  static constexpr bool kAllowExtra = false;
  double embedding_local_norm_threshold = 100.0;
  double global_norm_skip_threshold = 100.0;
  int global_norm_skip_time = 10;

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("embedding_local_norm_threshold", s.embedding_local_norm_threshold);
    v("global_norm_skip_threshold", s.global_norm_skip_threshold);
    v("global_norm_skip_time", s.global_norm_skip_time);
  }
};

// Union[bool, str, List[str]]: off/on, or the parameter names (patterns) to monitor.
using NormSelection = std::variant<bool, std::string, std::vector<std::string>>;

struct TrainStateConfig {
  static constexpr const char* kClassName = "TrainStateConfig";
  static constexpr bool kAllowExtra = false;
  NormSelection local_norm = std::string();
  bool local_loss = false;
  NormSelection device_norm = false;
  bool device_loss = false;

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("local_norm", s.local_norm);
    v("local_loss", s.local_loss);
    v("device_norm", s.device_norm);
    v("device_loss", s.device_loss);
  }
};

struct TensorboardConfig {
  static constexpr const char* kClassName = "TensorboardConfig";
  static constexpr bool kAllowExtra = false;
  std::string output_dir;
  int log_interval = 1;
  int queue_size = 1000;

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("output_dir", s.output_dir);
    v("log_interval", s.log_interval);
    v("queue_size", s.queue_size);
    // Names of the 06-18 reference, still accepted.
    v.alias("tensorboard_dir", "output_dir", s.output_dir);
    v.alias("tensorboard_log_interval", "log_interval", s.log_interval);
    v.alias("tensorboard_queue_size", "queue_size", s.queue_size);
  }
};

struct MoeMonitorConfig {
  static constexpr const char* kClassName = "MoeMonitorConfig";
  static constexpr bool kAllowExtra = false;
  std::optional<std::int64_t> save_tokens_per_expert_interval;
  // int N > 0: the first N layers; list: these layer ids.
  std::optional<std::variant<std::int64_t, std::vector<std::int64_t>>> target_layers;

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("save_tokens_per_expert_interval", s.save_tokens_per_expert_interval);
    v("target_layers", s.target_layers);
  }
};

struct MonitorConfig {
  static constexpr const char* kClassName = "MonitorConfig";
  static constexpr bool kAllowExtra = false;
  HealthCheckpointConfig health_checkpoint;
  TrainStateConfig train_state;
  TensorboardConfig tensorboard;
  MoeMonitorConfig moe_monitor;

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("health_checkpoint", s.health_checkpoint);
    v("train_state", s.train_state);
    v("tensorboard", s.tensorboard);
    v("moe_monitor", s.moe_monitor);
  }
};

// The reference's MindSpore context section; accepted for compatibility, unused by Loom.
struct ContextConfig {
  static constexpr const char* kClassName = "ContextConfig";
  static constexpr bool kAllowExtra = false;
  int mode = 1;
  std::string max_device_memory = "59GB";
  std::string device_target = "Ascend";

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("mode", s.mode);
    v("max_device_memory", s.max_device_memory);
    v("device_target", s.device_target);
  }
};

struct ProfilerConfig {
  static constexpr const char* kClassName = "ProfilerConfig";
  static constexpr bool kAllowExtra = false;
  bool enable_profiling = false;
  std::int64_t start_step = 1;
  std::int64_t end_step = 1;
  std::optional<std::string> output_path;
  std::optional<std::vector<int>> profiler_rank;  // nullopt = every rank
  int profiler_level = 0;
  bool mstx = false;
  bool profile_memory = false;
  bool profile_cpu = true;
  bool with_stack = true;

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("enable_profiling", s.enable_profiling);
    v("start_step", s.start_step);
    v("end_step", s.end_step);
    v("output_path", s.output_path);
    v("profiler_rank", s.profiler_rank);
    v("profiler_level", s.profiler_level);
    v("mstx", s.mstx);
    v("profile_memory", s.profile_memory);
    v("profile_cpu", s.profile_cpu);
    v("with_stack", s.with_stack);
  }
};

struct RecomputeConfig {
  static constexpr const char* kClassName = "RecomputeConfig";
  static constexpr bool kAllowExtra = false;
  std::string mode = "None";  // "None" | "full" | "select"
  std::optional<LayerSpecs> full_recompute_layer;
  std::optional<ModuleSelectMap> select_module;
  std::optional<std::vector<std::string>> exclude_op;

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("mode", s.mode);
    v("full_recompute_layer", s.full_recompute_layer);
    v("select_module", s.select_module);
    v("exclude_op", s.exclude_op);
  }
};

struct RecomputeCommConfig {
  static constexpr const char* kClassName = "RecomputeCommConfig";
  static constexpr bool kAllowExtra = false;
  bool enable = false;
  std::optional<ModuleSelectMap> select_module;

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("enable", s.enable);
    v("select_module", s.select_module);
  }
};

struct LayerSwapItem {
  static constexpr const char* kClassName = "LayerSwapItem";
  static constexpr bool kAllowExtra = false;
  LayerSpecs layers;

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("layers", s.layers);
  }
};

struct OpSwapItem {
  static constexpr const char* kClassName = "OpSwapItem";
  static constexpr bool kAllowExtra = false;
  std::string op_name;  // module path regex
  LayerSpecs layers;

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("op_name", s.op_name);
    v("layers", s.layers);
  }
};

struct SwapConfig {
  static constexpr const char* kClassName = "SwapConfig";
  static constexpr bool kAllowExtra = false;
  bool enable = false;
  std::int64_t default_prefetch = 1;
  std::optional<std::vector<LayerSwapItem>> layer_swap;  // only the first item is used
  std::optional<std::vector<OpSwapItem>> op_swap;

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("enable", s.enable);
    v("default_prefetch", s.default_prefetch);
    v("layer_swap", s.layer_swap);
    v("op_swap", s.op_swap);
  }
};

struct CallbackConfig {
  static constexpr const char* kClassName = "CallbackConfig";
  static constexpr bool kAllowExtra = true;
  std::string type;              // required: a registered callback name
  Json extras = Json::object();  // constructor arguments

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("type", s.type);
  }
};

struct LoraConfig {
  static constexpr const char* kClassName = "LoraConfig";
  static constexpr bool kAllowExtra = false;
  std::string target_modules;  // regex over module paths
  std::optional<std::string> exclude_layers;
  int lora_rank = 8;
  int lora_alpha = 16;
  double lora_dropout = 0.0;
  double lora_a_std = 0.01;
  double lora_b_std = 0.0;

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("target_modules", s.target_modules);
    v("exclude_layers", s.exclude_layers);
    v("lora_rank", s.lora_rank);
    v("lora_alpha", s.lora_alpha);
    v("lora_dropout", s.lora_dropout);
    v("lora_a_std", s.lora_a_std);
    v("lora_b_std", s.lora_b_std);
  }
};

struct TrainConfig {
  static constexpr const char* kClassName = "TrainConfig";
  static constexpr bool kAllowExtra = true;
  CheckpointConfig checkpoint;
  TrainingConfig training;
  ParallelismConfig parallelism;
  OptimizerConfig optimizer;
  LrSchedulerConfig lr_scheduler;
  TrainDatasetConfig train_dataset;
  ModelConfig model;
  MonitorConfig monitor;
  std::optional<ContextConfig> context;
  ProfilerConfig profiler;
  RecomputeConfig recompute;
  RecomputeCommConfig recompute_comm;
  SwapConfig swap;
  std::vector<CallbackConfig> callbacks;
  std::optional<LoraConfig> lora_config;
  Json extras = Json::object();  // unknown top-level keys, kept like the reference does

  // Where the configuration came from (file path) and the dotted paths the file or an override
  // set explicitly ("parallelism.sequence_parallel"), so consumers can tell a default from a choice.
  std::string source;
  std::set<std::string> explicit_fields;
  bool is_explicit(const std::string& path) const { return explicit_fields.count(path) > 0; }
  // Where each value was written, so a resolution after loading (resolve_config) still reports
  // "<file>:<line>:<col>"; shared, since copies of a configuration come from one document.
  std::shared_ptr<const SourceMarks> marks;

  template <class Self, class V>
  static void visit(Self& s, V& v) {
    v("checkpoint", s.checkpoint);
    v("training", s.training);
    v("parallelism", s.parallelism);
    v("optimizer", s.optimizer);
    v("lr_scheduler", s.lr_scheduler);
    v("train_dataset", s.train_dataset);
    v("model", s.model);
    v("monitor", s.monitor);
    v("context", s.context);
    v("profiler", s.profiler);
    v("recompute", s.recompute);
    v("recompute_comm", s.recompute_comm);
    v("swap", s.swap);
    v("callbacks", s.callbacks);
    v("lora_config", s.lora_config);
  }
};

}  // namespace loom::config
