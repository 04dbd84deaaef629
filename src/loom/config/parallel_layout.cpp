#include "loom/config/parallel_layout.h"

#include "loom/config/model_facts.h"

namespace loom::config {

dist::ParallelDegrees parallel_degrees(const ParallelismConfig& p) {
  dist::ParallelDegrees d;
  d.data_parallel_shard = p.data_parallel_shard;
  d.tensor_parallel = p.tensor_parallel;
  d.context_parallel = p.context_parallel;
  d.pipeline_parallel = p.pipeline_parallel;
  d.expert_parallel = p.expert_parallel;
  return d;
}

namespace {

void check_rampup(const TrainConfig& c, std::int64_t base, Diagnostics& diag) {
  const auto& r = *c.training.rampup_batch_size;
  const std::int64_t gbs = c.training.global_batch_size;
  if (r.size() != 3 || r[0] <= 0 || r[1] <= 0 || r[2] < 0 || gbs < r[0] || (gbs - r[0]) % r[1] != 0) return;
  const std::string units = "data_parallel*local_batch_size(" + std::to_string(base) + ")";
  const std::string p = "training.rampup_batch_size";
  // Reference BatchSizeScheduler._validate: every global batch size on the way must split into
  // whole accumulation steps.
  if (r[0] % base != 0) {
    diag.error(p, "rampup_batch_size[0] start_global_batch_size(" + std::to_string(r[0]) + ") must be divisible by " +
                      units + ".");
    return;
  }
  if (gbs % base != 0) {
    diag.error("training.global_batch_size", "training.global_batch_size(" + std::to_string(gbs) +
                                                 ") must be divisible by " + units + ".");
    return;
  }
  for (std::int64_t k = 0, n = (gbs - r[0]) / r[1]; k < n; ++k) {
    const std::int64_t level = r[0] + k * r[1];
    if (level % base != 0) {
      diag.error(p, "rampup produces gbs=" + std::to_string(level) + " at increment k=" + std::to_string(k) +
                        ", which is not divisible by " + units +
                        ". Adjust batch_size_increment so every intermediate gbs is divisible.");
      return;
    }
  }
}

}  // namespace

std::optional<ParallelLayout> resolve_layout(const TrainConfig& c, int world_size, Diagnostics& diag) {
  const auto degrees = parallel_degrees(c.parallelism);
  const auto problems = dist::ParallelDims::problems(world_size, degrees);
  for (const auto& problem : problems)
    diag.key_error("parallelism", problem.find("world_size(") == std::string::npos
                                      ? problem + " (world size " + std::to_string(world_size) + ")"
                                      : problem);
  if (!problems.empty()) return std::nullopt;

  ParallelLayout layout;
  layout.world_size = world_size;
  layout.dims = dist::ParallelDims::infer(world_size, degrees);
  const auto& dims = layout.dims;
  const int shard = c.parallelism.data_parallel_shard;
  if (shard > 0 && shard != dims.dp_shard())
    diag.warn("parallelism.data_parallel_shard",
              "is " + std::to_string(shard) + " but the inferred shard degree is " + std::to_string(dims.dp_shard()) +
                  " (data_parallel " + std::to_string(dims.data_parallel()) + " = dp_replicate " +
                  std::to_string(dims.dp_replicate()) + " x dp_shard " + std::to_string(dims.dp_shard()) + ")");

  // Gradient accumulation (reference trainer._compute_data_parallel_size).
  const TrainingConfig& t = c.training;
  if (t.local_batch_size > 0 && t.global_batch_size > 0) {
    const std::int64_t base = static_cast<std::int64_t>(dims.data_parallel()) * t.local_batch_size;
    layout.samples_per_micro_step = base;
    if (t.rampup_batch_size) {
      check_rampup(c, base, diag);
      const auto& r = *t.rampup_batch_size;
      const std::int64_t start = r.size() == 3 && r[0] > 0 ? r[0] : t.global_batch_size;
      layout.num_accumulation_steps = std::max<std::int64_t>(start / base, 1);
    } else if (base > t.global_batch_size) {
      diag.error("training.global_batch_size",
                 "The product of data_parallel and local_batch_size exceeds global_batch_size, please increase "
                 "global_batch_size or decrease local_batch_size. (data_parallel " +
                     std::to_string(dims.data_parallel()) + " x local_batch_size " + std::to_string(t.local_batch_size) +
                     " = " + std::to_string(base) + " > global_batch_size " + std::to_string(t.global_batch_size) + ")");
    } else {
      layout.num_accumulation_steps = t.global_batch_size / base;
      // The spec floors silently; Loom says so, because the effective batch is then smaller.
      if (t.global_batch_size % base != 0)
        diag.warn("training.global_batch_size",
                  std::to_string(t.global_batch_size) + " is not a multiple of data_parallel x local_batch_size = " +
                      std::to_string(base) + ": each step accumulates " + std::to_string(layout.num_accumulation_steps) +
                      " micro-batches = " + std::to_string(layout.num_accumulation_steps * base) + " samples, and " +
                      std::to_string(t.global_batch_size % base) + " samples of every global batch are dropped");
    }
    layout.samples_per_step = layout.num_accumulation_steps * base;
  }

  if (c.profiler.profiler_rank)
    for (std::size_t i = 0; i < c.profiler.profiler_rank->size(); ++i)
      if ((*c.profiler.profiler_rank)[i] >= world_size)
        diag.warn(index_path("profiler.profiler_rank", i), "rank " + std::to_string((*c.profiler.profiler_rank)[i]) +
                                                               " does not exist in a world of " +
                                                               std::to_string(world_size) + " ranks");

  // Pipeline stages (problems were reported when the file was loaded).
  Diagnostics scratch(diag.source());
  ModelFacts facts = model_facts(c, scratch);
  layout.pipeline = plan_pipeline(c.parallelism, facts.num_layers, c, scratch);
  return layout;
}

ParallelLayout resolve_layout(const TrainConfig& config, int world_size) {
  Diagnostics diag(config.source.empty() ? "<config>" : config.source);
  auto layout = resolve_layout(config, world_size, diag);
  diag.throw_if_errors();
  return *layout;
}

}  // namespace loom::config
