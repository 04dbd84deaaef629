#include "loom/plan/planner.h"

#include <gtest/gtest.h>

#include "loom/config/memory_estimate.h"
#include "loom/models/accounting.h"
#include "plan_test_util.h"

namespace loom::plan {
namespace {

using testing::load;
using testing::moe_yaml;
using testing::tiny_yaml;

TEST(Planner, OneF1BKeepsPpMinusStageMicroBatchesInFlight) {
  const auto c = load(tiny_yaml(), 2, {"parallelism.pipeline_parallel=2", "training.global_batch_size=8"});
  const Plan p = make_plan(c.config, *c.resolved, device_profile("h100"), int64_t{80} << 30);
  ASSERT_EQ(p.roles.size(), 2u);
  const auto& a = c.resolved->model_args();
  const int64_t stage0 = config::micro_batch_activation_bytes(c.config, a, c.resolved->layout, c.resolved->recompute,
                                                              32, {0, 1});
  const int64_t stage1 = config::micro_batch_activation_bytes(c.config, a, c.resolved->layout, c.resolved->recompute,
                                                              32, {2, 3});
  // + the worst moment of one backward: a layer's grads, or on the last stage the head's tensors.
  const int64_t layer = config::backward_transient_bytes(c.config, a, c.resolved->layout, c.resolved->recompute,
                                                         32, {0, 1}, false);
  const int64_t last = config::backward_transient_bytes(c.config, a, c.resolved->layout, c.resolved->recompute,
                                                        32, {2, 3}, true);
  EXPECT_GE(last, layer);
  EXPECT_EQ(p.roles[0].activations_in_flight, 2);
  EXPECT_EQ(p.roles[0].activation_peak_bytes, 2 * stage0 + layer);
  EXPECT_EQ(p.roles[1].activation_peak_bytes, stage1 + last);
  for (const RolePlan& r : p.roles)
    EXPECT_EQ(r.peak_bytes, r.state.parameter_bytes + r.state.gradient_bytes + r.state.optimizer_bytes +
                                r.fsdp_held_bytes + r.activation_peak_bytes);
  EXPECT_DOUBLE_EQ(p.bubble, 1.0 + 1.0 / 4.0);
}

TEST(Planner, RanksFlopsAddUpToTheModelsFlops) {
  const auto c = load(tiny_yaml(), 8, {"parallelism.tensor_parallel=2", "parallelism.pipeline_parallel=2",
                                       "training.global_batch_size=16"});
  const Plan p = make_plan(c.config, *c.resolved, device_profile("h100"), int64_t{80} << 30);
  double sum = 0;
  for (const RolePlan& r : p.roles) sum += r.flops_per_step * static_cast<double>(r.ranks.size());
  EXPECT_NEAR(sum, p.model_flops_per_step, 1e-9 * p.model_flops_per_step);
  EXPECT_GT(p.mfu, 0.0);
  EXPECT_LE(p.mfu, 1.0);
  int ranks = 0;
  for (const RolePlan& r : p.roles) ranks += static_cast<int>(r.ranks.size());
  EXPECT_EQ(ranks, 8);
}

TEST(Planner, FullRecomputeLowersTheActivationsAndAddsAForward) {
  const auto plain = load(tiny_yaml(), 1);
  const auto full = load(tiny_yaml() + "recompute:\n  mode: full\n  full_recompute_layer: ['0-3']\n", 1);
  const DeviceProfile h100 = device_profile("h100");
  const Plan a = make_plan(plain.config, *plain.resolved, h100, int64_t{80} << 30);
  const Plan b = make_plan(full.config, *full.resolved, h100, int64_t{80} << 30);
  EXPECT_LT(b.roles[0].activation_peak_bytes, a.roles[0].activation_peak_bytes);
  EXPECT_GT(b.roles[0].compute_time_s, a.roles[0].compute_time_s);
  EXPECT_DOUBLE_EQ(a.model_flops_per_step, b.model_flops_per_step);
}

// The one role of a one-process plan of `yaml` on an H100.
RolePlan one_process_role(const std::string& yaml) {
  const auto c = load(yaml, 1);
  return make_plan(c.config, *c.resolved, device_profile("h100"), int64_t{80} << 30).roles[0];
}

TEST(Planner, SelectiveRecomputeKeepsMoreThanFullAndRunsTheSelectedModulesAgain) {
  auto plan = [](const std::string& recompute) { return one_process_role(tiny_yaml() + recompute); };
  const RolePlan none = plan(""), full = plan("recompute:\n  mode: full\n  full_recompute_layer: ['0-3']\n");
  const RolePlan mlp = plan("recompute:\n  mode: select\n  select_module:\n    '.*mlp': ['0-3']\n");
  // The MLP's tensors go, the attention's stay.
  EXPECT_LT(mlp.activation_peak_bytes, none.activation_peak_bytes);
  EXPECT_GT(mlp.activation_peak_bytes, full.activation_peak_bytes);
  // One more forward of the MLPs: less than a whole layer's, more than nothing.
  EXPECT_GT(mlp.compute_time_s, none.compute_time_s);
  EXPECT_LT(mlp.compute_time_s, full.compute_time_s);
}

TEST(Planner, AModuleInsideASelectedOneIsNotRunTwiceOver) {
  auto plan = [](const std::string& select) {
    return one_process_role(moe_yaml() + "recompute:\n  mode: select\n  select_module:\n" + select);
  };
  const RolePlan mlp = plan("    '.*mlp': ['0-3']\n"), experts = plan("    'mlp.experts': ['0-3']\n");
  const RolePlan both = plan("    '.*mlp': ['0-3']\n    'mlp.experts': ['0-3']\n");
  EXPECT_LT(experts.compute_time_s, mlp.compute_time_s);
  EXPECT_DOUBLE_EQ(both.compute_time_s, mlp.compute_time_s);
  EXPECT_EQ(both.activation_peak_bytes, mlp.activation_peak_bytes);
}

// Sums of what FSDP holds per unit (rank_state.h fsdp_units).
struct UnitSums {
  int64_t root = 0, params = 0, grads = 0, largest = 0;
};
UnitSums unit_sums(const StateBytes& s) {
  UnitSums u;
  for (const StateBytes::FsdpUnit& f : s.fsdp_units) {
    if (f.unit.empty()) u.root += f.param_bytes + f.grad_bytes;
    else
      u.params += f.param_bytes, u.grads += f.grad_bytes, u.largest = std::max(u.largest, f.param_bytes + f.grad_bytes);
  }
  return u;
}

TEST(Planner, ReshardingFsdpHoldsTheRootAndOneUnitAtThePeak) {
  const auto c = load(tiny_yaml(), 4);
  const Plan p = make_plan(c.config, *c.resolved, device_profile("h100"), int64_t{80} << 30);
  ASSERT_EQ(p.roles.size(), 1u);
  const UnitSums u = unit_sums(p.roles[0].state);
  ASSERT_GT(u.params, 0);
  // Never more than the root and the largest unit with its grads and buffers; at least the root
  // and one unit's parameters.
  EXPECT_GE(p.roles[0].fsdp_held_bytes, u.root + u.largest / 2);
  EXPECT_LT(p.roles[0].fsdp_held_bytes, u.root + u.params);
  // Of four equal units the last layer's backward comes first: that moment is named.
  EXPECT_EQ(p.roles[0].peak_moment.rfind("decoder.layers.3's ", 0), 0u) << p.roles[0].peak_moment;
}

TEST(Planner, UnderPipelinesEveryUnitsAccumulatedGradsCountOnceABackwardFollowsItsChunksFirst) {
  // pp 2 with 4 micro-batches: stage 0 runs F0 F1 B0 F2 B1 ..., so B1 starts with two
  // micro-batches in flight and every unit's full grads from B0 held (reshard 'never').
  const auto many = load(tiny_yaml(), 4, {"parallelism.pipeline_parallel=2", "training.global_batch_size=16"});
  const Plan p = make_plan(many.config, *many.resolved, device_profile("h100"), int64_t{80} << 30);
  const UnitSums u = unit_sums(p.roles[0].state);
  EXPECT_GE(p.roles[0].fsdp_held_bytes, u.root + u.params + u.grads);
  EXPECT_EQ(p.roles[0].activations_in_flight, 2);
  EXPECT_NE(p.roles[0].peak_moment.find("the step's grads accumulated"), std::string::npos) << p.roles[0].peak_moment;
  // With 2 micro-batches (F0 F1 B0 B1) the second backward has one in flight: the peak is the
  // first backward, with only the parameters gathered.
  const auto two = load(tiny_yaml(), 4, {"parallelism.pipeline_parallel=2", "training.global_batch_size=8"});
  const Plan q = make_plan(two.config, *two.resolved, device_profile("h100"), int64_t{80} << 30);
  EXPECT_LT(q.roles[0].fsdp_held_bytes, u.root + u.params + u.grads);
  EXPECT_EQ(q.roles[0].peak_moment.find("accumulated"), std::string::npos) << q.roles[0].peak_moment;
}

TEST(Planner, DoesNotFitWhenThePeakExceedsTheDeviceMemory) {
  const auto c = load(tiny_yaml(), 1);
  const Plan p = make_plan(c.config, *c.resolved, device_profile("h100"), 1 << 20);
  EXPECT_FALSE(p.fits);
  EXPECT_GT(p.max_peak_bytes, 1 << 20);
}

}  // namespace
}  // namespace loom::plan
