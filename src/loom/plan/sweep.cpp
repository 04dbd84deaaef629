#include "loom/plan/sweep.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "loom/config/diagnostics.h"

namespace loom::plan {

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

}  // namespace

std::vector<Candidate> sweep_candidates(int world, int64_t num_layers, int64_t num_experts) {
  std::vector<Candidate> out;
  for (int pp : divisors(world))
    for (int tp : divisors(world / pp))
      for (int cp : divisors(world / pp / tp))
        for (int shard : divisors(world / pp / tp / cp)) {
          const int replicate = world / pp / tp / cp / shard;
          const int max_v = pp > 1 ? static_cast<int>(std::max<int64_t>(1, num_layers / pp)) : 1;
          for (int v = 1; v <= max_v; ++v)
            for (int ep : divisors(shard * cp * tp)) {
              if (ep > 1 && (num_experts <= 0 || num_experts % ep != 0)) continue;
              out.push_back({shard, tp, cp, pp, v, ep, replicate});
            }
        }
  return out;
}

SweepResult sweep(const config::TrainConfig& base, int world, const DeviceProfile& device, int64_t device_memory) {
  SweepResult result;
  int64_t layers = 0, experts = 0;
  {
    // The model's depth and experts bound v and ep; read once from a one-rank resolution.
    // Whatever fails here fails every layout (the model, the sequence length, the profile's
    // peak for compute_dtype): said once, instead of every candidate being dropped in silence.
    config::TrainConfig one = base;
    one.parallelism.data_parallel_shard = -1;
    one.parallelism.tensor_parallel = one.parallelism.context_parallel = one.parallelism.pipeline_parallel = 1;
    one.parallelism.expert_parallel = one.parallelism.pipeline_parallel_interleave_num = 1;
    one.parallelism.pipeline_parallel_layers_per_stage = config::PipelineLayersPerStage{};
    config::Diagnostics diag(base.source, base.marks);
    auto r = config::resolve_config(one, 1, diag);
    const std::vector<std::string> errors = diag.errors();
    LOOM_CHECK(r && r->model && errors.empty(), ConfigError, "loom plan --sweep: the configuration does not resolve "
               "even on one rank, so no layout can: ", errors.empty() ? std::string("the model is incomplete") : errors[0]);
    layers = r->model->num_layers;
    experts = r->model->num_experts;
    PlanOptions options;
    options.roles = false;
    make_plan(one, *r, device, device_memory, options);
  }
  std::map<std::tuple<int, int, int, int, int>, std::vector<HeldParameter>> cache;
  std::set<std::pair<int, int>> unplaceable;  // (pp, v) whose layers cannot be placed
  for (const Candidate& c : sweep_candidates(world, layers, experts)) {
    ++result.candidates;
    if (unplaceable.count({c.pp, c.v})) continue;
    config::TrainConfig cfg = base;
    auto& p = cfg.parallelism;
    p.data_parallel_shard = c.dp_shard;
    p.tensor_parallel = c.tp;
    p.context_parallel = c.cp;
    p.pipeline_parallel = c.pp;
    p.pipeline_parallel_interleave_num = c.v;
    p.expert_parallel = c.ep;
    // A stage list belongs to the pipeline degree it was written for; other degrees place the
    // layers automatically.
    if (c.pp != base.parallelism.pipeline_parallel || c.v != base.parallelism.pipeline_parallel_interleave_num)
      p.pipeline_parallel_layers_per_stage = config::PipelineLayersPerStage{};
    config::Diagnostics diag(cfg.source, cfg.marks);
    std::optional<config::ResolvedConfig> resolved;
    try {
      resolved = config::resolve_config(cfg, world, diag);
    } catch (const ConfigError&) {
      continue;
    }
    if (!resolved || !resolved->model || diag.has_errors()) {
      // The placement of layers on stages depends on pp, v and the model alone: when it is the
      // only problem, no other candidate with this (pp, v) is tried.
      const std::vector<std::string> errors = diag.errors();
      const bool placement_only =
          !errors.empty() && std::all_of(errors.begin(), errors.end(), [](const std::string& e) {
            return e.find("parallelism.pipeline_parallel_layers_per_stage:") != std::string::npos;
          });
      if (placement_only) unplaceable.insert({c.pp, c.v});
      continue;
    }
    ++result.valid;
    PlanOptions options;
    options.roles = false;
    options.held = [&](int pp_rank, int rank) -> std::vector<HeldParameter> {
      const auto key = std::make_tuple(c.tp, c.ep, c.pp, c.v, pp_rank);
      auto it = cache.find(key);
      if (it == cache.end()) it = cache.emplace(key, held_parameters(cfg, *resolved, rank)).first;
      return it->second;
    };
    try {
      Plan plan = make_plan(cfg, *resolved, device, device_memory, options);
      if (plan.fits) result.fitting.push_back(std::move(plan));
    } catch (const ConfigError&) {
      continue;  // a layout the strategies refuse (a size that does not split): not runnable
    } catch (const ShapeError&) {
      continue;
    }
  }
  std::stable_sort(result.fitting.begin(), result.fitting.end(),
                   [](const Plan& a, const Plan& b) { return a.step_time_s < b.step_time_s; });
  return result;
}

}  // namespace loom::plan
