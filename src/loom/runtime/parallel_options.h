// What the configuration tells each parallel strategy (spec parallel_training.md): the options
// dist::parallelize applies them with, and the pipeline schedule's. The one reading of the
// parallelism section below config/ — the runtime, `loom plan` and the benchmarks take these.
#pragma once

#include <functional>

#include "loom/config/parallel_layout.h"
#include "loom/config/resolved_config.h"
#include "loom/config/sections.h"
#include "loom/dist/expert_parallel.h"
#include "loom/dist/fsdp.h"
#include "loom/dist/parallelize.h"
#include "loom/dist/pipeline.h"
#include "loom/runtime/pipeline_order.h"

namespace loom::runtime {

dist::FsdpOptions fsdp_options(const config::ParallelismConfig& parallelism, const dist::ParallelDims& dims);

// The token dispatcher of expert parallelism (moe_token_dispatcher_type, npu_nums_per_device).
dist::ExpertParallelOptions expert_parallel_options(const config::ParallelismConfig& parallelism);

// Context parallelism's method, split and overlap (context_parallel_method, ulysses_degree_in_cp,
// context_parallel_load_balance, context_parallel_async).
dist::ContextParallelOptions context_parallel_options(const config::ParallelismConfig& parallelism);

// The virtual stages' layers as the configuration placed them (config::plan_pipeline).
dist::PipelineLayout pipeline_layout(const config::PipelinePlan& plan);

// The pipeline schedule's options as they take effect (overlap_b_f on MoE models only).
PipelineScheduleOptions pipeline_schedule_options(const config::ParallelismConfig& parallelism,
                                                  const config::PipelinePlan& plan);

// Every strategy's options for `resolved`'s layout, with `memory_policy` (recompute/swap) to
// install between the model-splitting strategies and FSDP.
dist::ParallelizeOptions parallelize_options(const config::TrainConfig& config, const config::ResolvedConfig& resolved,
                                             std::function<void(nn::Module&)> memory_policy);

}  // namespace loom::runtime
