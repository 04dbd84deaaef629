#include "loom/runtime/parallel_options.h"

#include "loom/dist/context_parallel.h"

namespace loom::runtime {

dist::FsdpOptions fsdp_options(const config::ParallelismConfig& parallelism, const dist::ParallelDims& dims) {
  dist::FsdpOptions o;
  o.reshard_after_forward_policy = parallelism.reshard_after_forward_policy;
  o.pipeline_parallel = dims.pp() > 1;
  o.disable_gradient_division = parallelism.disable_gradient_division;
  o.cpu_offload = parallelism.cpu_offload;
  return o;
}

dist::ExpertParallelOptions expert_parallel_options(const config::ParallelismConfig& parallelism) {
  dist::ExpertParallelOptions o;
  if (parallelism.moe_token_dispatcher_type == "alltoall_deredundancy")
    o.dispatcher = dist::TokenDispatcher::alltoall_deredundancy;
  o.ranks_per_node = parallelism.npu_nums_per_device;
  return o;
}

dist::ContextParallelOptions context_parallel_options(const config::ParallelismConfig& parallelism) {
  dist::ContextParallelOptions o;
  o.load_balanced = parallelism.context_parallel_load_balance;
  o.async = parallelism.context_parallel_async;
  if (parallelism.context_parallel_method == "ulysses") o.method = dist::ContextParallelMethod::ulysses;
  if (parallelism.context_parallel_method == "hybrid") {
    o.method = dist::ContextParallelMethod::hybrid;
    o.ulysses_degree = parallelism.ulysses_degree_in_cp.value_or(1);
  }
  return o;
}

dist::PipelineLayout pipeline_layout(const config::PipelinePlan& plan) {
  dist::PipelineLayout layout;
  layout.pipeline_parallel = plan.pipeline_parallel;
  layout.chunks = plan.interleave_num;
  for (const config::VirtualStage& s : plan.stages) layout.stage_layers.emplace_back(s.layers.first, s.layers.last);
  return layout;
}

PipelineScheduleOptions pipeline_schedule_options(const config::ParallelismConfig& parallelism,
                                                  const config::PipelinePlan& plan) {
  PipelineScheduleOptions o;
  o.overlap_p2p = parallelism.pipeline_parallel_overlap_p2p;
  o.kind = plan.schedule == "gpipe" ? PipelineScheduleKind::gpipe : PipelineScheduleKind::one_f_one_b;
  o.overlap_b_f = plan.overlap_b_f;
  return o;
}

dist::ParallelizeOptions parallelize_options(const config::TrainConfig& config, const config::ResolvedConfig& resolved,
                                             std::function<void(nn::Module&)> memory_policy) {
  dist::ParallelizeOptions o;
  o.fsdp = fsdp_options(config.parallelism, resolved.layout.dims);
  o.fsdp.compute_dtype = dist::mixed_precision_compute_dtype(resolved.model_args().compute_dtype);
  o.expert = expert_parallel_options(config.parallelism);
  o.context = context_parallel_options(config.parallelism);
  if (resolved.layout.pipeline) o.pipeline = pipeline_layout(*resolved.layout.pipeline);
  o.memory_policy = std::move(memory_policy);
  return o;
}

}  // namespace loom::runtime
