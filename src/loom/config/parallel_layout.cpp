#include "loom/config/parallel_layout.h"

#include <algorithm>

#include "loom/config/checks.h"
#include "loom/core/error.h"

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

std::vector<std::string> world_size_problems(int world, const dist::ParallelDegrees& d) {
  auto s = [](long long v) { return std::to_string(v); };
  if (world < 1) return {"world size must be >= 1, got " + s(world)};
  LOOM_ASSERT(d.tensor_parallel >= 1 && d.context_parallel >= 1 && d.pipeline_parallel >= 1 && d.expert_parallel >= 1 &&
                  (d.data_parallel_shard == -1 || d.data_parallel_shard >= 1),
              "the parallelism rules reject these degrees before the world size is considered");
  std::vector<std::string> out;
  const int tp = d.tensor_parallel, cp = d.context_parallel, pp = d.pipeline_parallel, ep = d.expert_parallel;
  const long long model_ranks = static_cast<long long>(tp) * pp * cp;
  const long long dp = world / model_ranks;
  if (dp <= 0) {
    out.push_back("tensor_parallel(" + s(tp) + ") * pipeline_parallel(" + s(pp) + ") * context_parallel(" + s(cp) +
                  ") must be less than or equal to world_size(" + s(world) + ").");
    return out;
  }
  const long long dp_replicate = d.data_parallel_shard < 0 ? 1 : std::max<long long>(dp / d.data_parallel_shard, 1);
  const long long dp_shard = dp / dp_replicate;
  const long long product = dp_replicate * dp_shard * cp * tp * pp;
  if (product != world) {
    const std::string why =
        world % model_ranks != 0
            ? "world_size must be divisible by tensor_parallel * pipeline_parallel * context_parallel = " + s(model_ranks)
            : "parallelism.data_parallel_shard (" + s(d.data_parallel_shard) + ") must divide data_parallel (" + s(dp) +
                  " = world_size / (tp * pp * cp))";
    out.push_back("Invalid parallel dims: dp_replicate(" + s(dp_replicate) + ") * dp_shard(" + s(dp_shard) + ") * cp(" +
                  s(cp) + ") * tp(" + s(tp) + ") * pp(" + s(pp) + ") = " + s(product) + " != world_size(" + s(world) +
                  "); " + why);
    return out;
  }
  const long long expert_block = dp_shard * cp * tp;
  if (expert_block % ep != 0)
    out.push_back("parallelism.expert_parallel (" + s(ep) + ") must divide dp_shard * cp * tp = " + s(expert_block) +
                  " (dp_shard " + s(dp_shard) + ", cp " + s(cp) + ", tp " + s(tp) +
                  "): experts are spread over the dp_shard x cp x tp ranks of one replica, so efsdp = "
                  "dp_shard * cp * tp / expert_parallel must be a whole number");
  return out;
}

std::int64_t BatchRampup::global_batch_size(std::int64_t consumed) const {
  const std::int64_t increments = increment > 0 ? (target - start) / increment : 0;
  if (increments <= 0 || consumed > ramp_samples) return target;
  if (ramp_samples == 0) return start;  // only the first step, before any sample, is below target
  const double samples_per_increment = static_cast<double>(ramp_samples) / static_cast<double>(increments);
  const auto steps = static_cast<std::int64_t>(static_cast<double>(consumed) / samples_per_increment);
  return std::min(start + steps * increment, target);
}

std::int64_t ParallelLayout::micro_batches_at(std::int64_t consumed_samples) const {
  if (!rampup) return num_accumulation_steps;
  return std::max<std::int64_t>(rampup->global_batch_size(consumed_samples) / samples_per_micro_step, 1);
}

std::int64_t ParallelLayout::final_micro_batches() const {
  return rampup ? std::max<std::int64_t>(rampup->target / samples_per_micro_step, 1) : num_accumulation_steps;
}

std::vector<std::int64_t> ParallelLayout::micro_batch_counts() const {
  std::vector<std::int64_t> counts;
  if (rampup && rampup->increment > 0)
    for (std::int64_t gbs = rampup->start; gbs < rampup->target; gbs += rampup->increment)
      counts.push_back(std::max<std::int64_t>(gbs / samples_per_micro_step, 1));
  counts.push_back(final_micro_batches());
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
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

// Every micro-batch count a step runs (each of a ramp's) must suit the pipeline schedule; fewer
// micro-batches than stages warn about the bubble.
void check_pipeline_micro_batches(const ParallelLayout& layout, Diagnostics& diag) {
  if (!layout.pipeline || layout.pipeline->pipeline_parallel <= 1) return;
  const int pp = layout.pipeline->pipeline_parallel;
  // Every step of a ramp runs its own count through the schedule.
  bool refused = false;
  for (const std::int64_t count : layout.micro_batch_counts()) {
    const std::string problem = interleaved_micro_batch_problem(pp, layout.pipeline->interleave_num, count);
    if (problem.empty()) continue;
    refused = true;
    const bool ramped = count != layout.final_micro_batches();
    diag.error(ramped ? "training.rampup_batch_size" : "training.global_batch_size",
               problem + "; micro-batches per step = " +
                   (ramped ? "a global batch size of the ramp" : std::string("global_batch_size")) +
                   " / (data_parallel x local_batch_size) = " + std::to_string(count) +
                   (ramped ? ": change rampup_batch_size" : ": change global_batch_size or local_batch_size"));
    break;
  }
  const std::int64_t m = layout.final_micro_batches();
  if (!refused && m < pp)
    diag.warn("training.global_batch_size",
              "gives " + std::to_string(m) + " micro-batch" + (m == 1 ? "" : "es") + " per step, fewer than the " +
                  std::to_string(pp) + " pipeline stages: most stages idle most of the step (the pipeline bubble); "
                  "raise global_batch_size to at least " + std::to_string(pp) + " x data_parallel x "
                  "local_batch_size");
}

}  // namespace

std::string interleaved_micro_batch_problem(int pp, int chunks, std::int64_t micro_batches) {
  if (chunks <= 1 || pp <= 1) return "";
  const std::int64_t rounds = std::max<std::int64_t>(1, micro_batches / pp);
  if (micro_batches % rounds == 0) return "";
  return "the interleaved 1F1B schedule (pipeline_parallel_interleave_num " + std::to_string(chunks) + ") runs the " +
         std::to_string(micro_batches) + " micro-batches of a step in " + std::to_string(rounds) +
         " rounds (micro-batches // pipeline_parallel " + std::to_string(pp) + "), so their count must be a "
         "multiple of " + std::to_string(rounds) + " or below pipeline_parallel";
}

namespace detail {

std::optional<ParallelLayout> resolve_layout(const TrainConfig& c, int world_size, std::optional<PipelinePlan> pipeline,
                                             Diagnostics& diag) {
  const auto degrees = parallel_degrees(c.parallelism);
  const auto problems = world_size_problems(world_size, degrees);
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
  // Several ranks training on with another shard degree than the file asks for would hold and
  // save another layout than the file's: the layout does not fit this world, so every rank stops.
  // One process runs any file (a mesh of size one), with a warning.
  if (shard > 0 && shard != dims.dp_shard()) {
    const std::string misfit =
        "is " + std::to_string(shard) + " but the inferred shard degree is " + std::to_string(dims.dp_shard()) +
        " (data_parallel " + std::to_string(dims.data_parallel()) + " = dp_replicate " +
        std::to_string(dims.dp_replicate()) + " x dp_shard " + std::to_string(dims.dp_shard()) + " on " +
        std::to_string(world_size) + " ranks); set it to a divisor of data_parallel (" +
        std::to_string(dims.data_parallel()) + ") or -1, or run on a world size it fits";
    if (world_size > 1) diag.error("parallelism.data_parallel_shard", misfit);
    else diag.warn("parallelism.data_parallel_shard", misfit);
  }

  // Gradient accumulation (reference trainer._compute_data_parallel_size).
  const TrainingConfig& t = c.training;
  if (t.local_batch_size > 0 && t.global_batch_size > 0) {
    const std::int64_t base = static_cast<std::int64_t>(dims.data_parallel()) * t.local_batch_size;
    layout.samples_per_micro_step = base;
    if (t.rampup_batch_size) {
      check_rampup(c, base, diag);
      const auto& r = *t.rampup_batch_size;
      if (r.size() == 3 && r[0] > 0 && r[1] > 0 && r[2] >= 0)
        layout.rampup = BatchRampup{r[0], r[1], r[2], t.global_batch_size};
      const std::int64_t start = layout.rampup ? r[0] : t.global_batch_size;
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

  // The pipeline stages do not depend on the world size: check_parallelism placed them. The
  // schedule runs the accumulation steps as its micro-batches, which do.
  layout.pipeline = std::move(pipeline);
  check_pipeline_micro_batches(layout, diag);
  return layout;
}

}  // namespace detail

}  // namespace loom::config
