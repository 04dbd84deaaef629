// Fields Loom accepts (they are the spec's) whose written value it does not act on: each warns
// once, at its line, when the file asks for something Loom does not do, in check-config and train
// alike (docs/configuration.md "Fields without an effect" lists them). A field whose value is what
// Loom does anyway (deterministic: True, data_parallel_shard_strategy: optim_grads_params) is
// silent: it took effect. The effective configuration writes these fields as Loom runs them
// (effective_config.cpp), so it loads again without these warnings.
#include "loom/config/checks.h"

namespace loom::config::detail {

namespace {

struct InertField {
  const char* path;
  bool (*asks_for_other)(const TrainConfig& c);  // the written value asks for something Loom does not do
  const char* why;
};

const InertField kInertFields[] = {
    {"training.deterministic", [](const TrainConfig& c) { return !c.training.deterministic; },
     "is False, but Loom's kernels and reductions always run in a fixed order: runs of a configuration on the same "
     "world size and thread count are bit-identical, and False makes nothing faster"},
    {"parallelism.data_parallel_shard_strategy",
     [](const TrainConfig& c) { return c.parallelism.data_parallel_shard_strategy != "optim_grads_params"; },
     "has no effect: Loom always shards parameters, gradients and optimizer state (optim_grads_params; the reference "
     "does not read the field either); reshard_after_forward_policy decides when gathered parameters are freed"},
    {"parallelism.dense_fsdp_shard_size", [](const TrainConfig& c) { return c.parallelism.dense_fsdp_shard_size.has_value(); },
     "has no effect: dense parameters are sharded over the whole fsdp axis (data_parallel_shard x context_parallel)"},
    {"parallelism.enable_mc2", [](const TrainConfig& c) { return c.parallelism.enable_mc2; },
     "has no effect: MC2 fuses matmuls with their tensor-parallel communication on Ascend NPUs; Loom runs them as "
     "separate operations, with the same results"},
    {"parallelism.enable_loss_parallel",
     [](const TrainConfig& c) { return !c.parallelism.enable_loss_parallel && c.parallelism.tensor_parallel > 1; },
     "is False, but under tensor_parallel > 1 Loom always computes the loss over the vocabulary shards (loss "
     "parallel); the full logits are never gathered"},
    {"parallelism.expert_parallel_async_d2h", [](const TrainConfig& c) { return c.parallelism.expert_parallel_async_d2h; },
     "has no effect: the token counts of the expert dispatch are in host memory already, so there is no "
     "device-to-host copy to make asynchronous"},
    {"parallelism.expert_parallel_use_safe_tokens",
     [](const TrainConfig& c) { return c.parallelism.expert_parallel_use_safe_tokens; },
     "is True, but Loom adds no zero padding rows before the expert dispatch: its grouped GEMM takes experts that "
     "receive no token, and the rows would add nothing to any output"},
    {"parallelism.pipeline_parallel_p2p_transport",
     [](const TrainConfig& c) { return c.parallelism.pipeline_parallel_p2p_transport != "plain"; },
     "has no effect: pipeline activations and grads go through the process group's point-to-point transfers "
     "('plain')"},
    {"parallelism.pipeline_parallel_enable_dxdw_split",
     [](const TrainConfig& c) { return c.parallelism.pipeline_parallel_enable_dxdw_split; },
     "has no effect: it is a reserved field (parallel_training.md: the dynamic-graph trainer does not read it), with "
     "or without pipeline_parallel_overlap_b_f"},
    {"train_dataset.use_distribute_dataset", [](const TrainConfig& c) { return c.train_dataset.use_distribute_dataset; },
     "has no effect: every rank of a tensor- or context-parallel group reads the same batch from the dataset itself "
     "instead of receiving it by broadcast; the batches are identical either way"},
    {"train_dataset.numa_enable", [](const TrainConfig& c) { return c.train_dataset.numa_enable; },
     "has no effect: Loom does not bind its data workers to NUMA nodes"},
    {"train_dataset.dataloader.python_multiprocessing",
     [](const TrainConfig& c) { return c.train_dataset.dataloader.python_multiprocessing; },
     "has no effect: Loom's loader builds batches on C++ threads (num_parallel_workers), not Python processes"},
    {"monitor.tensorboard.queue_size", [](const TrainConfig& c) { return c.monitor.tensorboard.queue_size != 1000; },
     "has no effect: Loom writes each TensorBoard event when it is logged; there is no queue to size"},
    {"profiler.mstx", [](const TrainConfig& c) { return c.profiler.mstx; },
     "has no effect: mstx markers belong to the Ascend profiler; Loom's trace is a Chrome trace of steps, modules, "
     "ops and backward nodes (profiler_level)"},
    {"profiler.with_stack", [](const TrainConfig& c) { return c.profiler.with_stack; },
     "has no effect: Loom has no Python call stacks to collect; module spans stand for them in the trace"},
    {"profiler.profile_cpu", [](const TrainConfig& c) { return !c.profiler.profile_cpu; },
     "is False, but Loom's trace always records the host's activity (its compute runs there)"},
    {"checkpoint.save_global_layout_cache", [](const TrainConfig& c) { return !c.checkpoint.save_global_layout_cache; },
     "is False, but Loom writes every shard's global layout to metadata.json with each checkpoint (the reshard on "
     "load reads it); there is no separate cache to skip"},
    {"checkpoint.load_worker_number", [](const TrainConfig& c) { return c.checkpoint.load_worker_number > 1; },
     "has no effect: each rank reads its checkpoint shards on one thread"},
    {"checkpoint.reshard_worker_num", [](const TrainConfig& c) { return c.checkpoint.reshard_worker_num > 1; },
     "has no effect: each rank reshards what it loads on one thread"},
    {"context.max_device_memory", [](const TrainConfig& c) { return c.context->max_device_memory != "59GB"; },
     "has no effect: Loom reserves no device memory up front; the start-up memory check compares the estimate with "
     "LOOM_MEMORY_LIMIT, else the cgroup limit or the available memory"},
};

}  // namespace

void warn_inert_fields(const TrainConfig& c, Diagnostics& diag) {
  for (const InertField& f : kInertFields)
    if (c.is_explicit(f.path) && f.asks_for_other(c)) diag.warn(f.path, f.why);
}

}  // namespace loom::config::detail
