// Recompute (full, select, exclude_op), communication recompute and swap give exactly the loss
// and grads of running without them; validation messages; unmatched-pattern warnings.
// (spec memory_optimization.md.)
#include <gtest/gtest.h>

#include "loom/autograd/checkpoint.h"
#include "loom/autograd/engine.h"
#include "loom/core/allocator.h"
#include "loom/memory/policy.h"
#include "loom/nn/linear.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/reduce.h"
#include "loom/ops/shape.h"

using namespace loom;
using namespace loom::memory;

namespace {

// A linear whose output goes through a named "all_gather" operation, shaped like a tensor-
// parallel gather over 2 ranks (features doubled) and run as the operator AllGather, as
// dist::all_gather runs (autograd::reuse_in_recompute); it counts its calls.
class GatherLinear : public nn::Linear {
 public:
  GatherLinear(int64_t in, int64_t out) : nn::Linear(in, out) { register_operation("all_gather"); }
  Tensor forward_gathered(const Tensor& x, int* calls) {
    Tensor y = forward(x);
    return call_operation("all_gather", {y}, [calls](const std::vector<Tensor>& in) {
             return autograd::reuse_in_recompute("AllGather", [&] {
               ++*calls;
               return std::vector<Tensor>{ops::cat({in[0], in[0]}, -1)};
             });
           })[0];
  }
};

class Attention : public nn::Module {
 public:
  explicit Attention(int64_t d) : Module("Attention") {
    linear_q = register_module("linear_q", std::make_shared<GatherLinear>(d, d));
    linear_proj = register_module("linear_proj", std::make_shared<nn::Linear>(2 * d, d));
  }
  Tensor forward(const Tensor& x, int* gathers) {
    return invoke1(x, [this, gathers](const Tensor& in) {
      return linear_proj->forward(ops::silu(linear_q->forward_gathered(in, gathers)));
    });
  }
  std::shared_ptr<GatherLinear> linear_q;
  std::shared_ptr<nn::Linear> linear_proj;
};

class Mlp : public nn::Module {
 public:
  explicit Mlp(int64_t d) : Module("Mlp") {
    linear_fc1 = register_module("linear_fc1", std::make_shared<nn::Linear>(d, 3 * d));
    linear_fc2 = register_module("linear_fc2", std::make_shared<nn::Linear>(3 * d, d));
  }
  Tensor forward(const Tensor& x) {
    return invoke1(x, [this](const Tensor& in) { return linear_fc2->forward(ops::gelu(linear_fc1->forward(in), true)); });
  }
  std::shared_ptr<nn::Linear> linear_fc1, linear_fc2;
};

class Layer : public nn::Module {
 public:
  explicit Layer(int64_t d) : Module("Layer") {
    self_attention = register_module("self_attention", std::make_shared<Attention>(d));
    mlp = register_module("mlp", std::make_shared<Mlp>(d));
  }
  Tensor forward(const Tensor& x, int* gathers) {
    return invoke1(x, [this, gathers](const Tensor& in) {
      Tensor h = ops::add(in, self_attention->forward(in, gathers));
      return ops::add(h, mlp->forward(h));
    });
  }
  std::shared_ptr<Attention> self_attention;
  std::shared_ptr<Mlp> mlp;
};

class Model : public nn::Module {
 public:
  Model(int64_t layers, int64_t d) : Module("Model") {
    auto list = register_module("layers", std::make_shared<nn::ModuleList>());
    for (int64_t i = 0; i < layers; ++i) blocks.push_back(list->append(std::make_shared<Layer>(d)));
    materialize(11);
  }
  Tensor loss(const Tensor& x) {
    Tensor h = x;
    for (auto& b : blocks) h = b->forward(h, &gathers);
    return ops::mean(ops::square(h));
  }
  std::vector<LayerRef> layer_refs() {
    std::vector<LayerRef> refs;
    for (size_t i = 0; i < blocks.size(); ++i)
      refs.push_back({static_cast<int64_t>(i), "layers." + std::to_string(i), blocks[i].get()});
    return refs;
  }
  std::vector<std::shared_ptr<Layer>> blocks;
  int gathers = 0;
};

constexpr int64_t kLayers = 4, kDim = 16;

Tensor input() {
  Tensor x = Tensor::empty({8, kDim});
  fill_normal(x, 0, 1, RngState{5, 5, 0});
  return x;
}

struct Result {
  double loss;
  std::map<std::string, std::vector<float>> grads;
  int gathers_forward, gathers_total;
  int64_t peak_delta;
  int64_t held_after_forward;  // device bytes kept alive between forward and backward
  MemoryPlan plan;
  SwapStats swap;
};

Result run(const RecomputeOptions& rc, const SwapOptions& sw) {
  Model m(kLayers, kDim);
  Result r;
  r.plan = plan_memory(m.layer_refs(), kLayers, rc, sw);
  auto swap = apply_memory_plan(m, m.layer_refs(), r.plan, rc);
  Tensor x = input();
  reset_peak_memory();
  const int64_t base = memory_stats().current_bytes;
  Tensor loss = m.loss(x);
  r.held_after_forward = memory_stats().current_bytes - base;
  r.gathers_forward = m.gathers;
  autograd::backward(loss);
  r.gathers_total = m.gathers;
  r.peak_delta = memory_stats().peak_bytes - base;
  r.loss = loss.item();
  for (auto& [n, p] : m.named_parameters()) r.grads[n] = p->tensor.grad().to_float_vector();
  if (swap) r.swap = swap->stats();
  return r;
}

void expect_identical(const Result& a, const Result& b) {
  EXPECT_EQ(a.loss, b.loss);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (auto& [n, g] : a.grads) EXPECT_EQ(g, b.grads.at(n)) << n;
}

std::set<int64_t> all_layers() { return {0, 1, 2, 3}; }

}  // namespace

TEST(MemoryPolicy, FullRecomputeGivesIdenticalGrads) {
  Result base = run({}, {});
  RecomputeOptions rc;
  rc.mode = RecomputeOptions::Mode::full;
  rc.full_layers = all_layers();
  Result full = run(rc, {});
  expect_identical(base, full);
  EXPECT_EQ(full.plan.full_recompute, all_layers());
  // each layer's gather ran again in its recompute
  EXPECT_EQ(full.gathers_total, 2 * full.gathers_forward);
}

TEST(MemoryPolicy, SelectRecomputeMatchesWholePathsAndParentsCoverChildren) {
  RecomputeOptions rc;
  rc.mode = RecomputeOptions::Mode::select;
  rc.full_layers = {0};                             // full and select on disjoint layers
  rc.select = {{".*mlp", {1, 2, 3}}, {"mlp\\.linear_fc1", {1, 2}}, {"self_attention", {3}}};
  Result sel = run(rc, {});
  expect_identical(run({}, {}), sel);
  EXPECT_EQ(sel.plan.full_recompute, std::set<int64_t>{0});
  // 'mlp.linear_fc1' is covered by its parent 'mlp'; layer 0 is full, so no select there.
  EXPECT_EQ(sel.plan.select_recompute.count(0), 0u);
  EXPECT_EQ(sel.plan.select_recompute.at(1), std::vector<std::string>{"mlp"});
  EXPECT_EQ(sel.plan.select_recompute.at(3), (std::vector<std::string>{"mlp", "self_attention"}));
  // '.*mlp' must match the whole path: 'mlp.linear_fc1' is not matched by 'mlp' alone.
  RecomputeOptions partial;
  partial.mode = RecomputeOptions::Mode::select;
  partial.select = {{"linear_fc", all_layers()}};
  Result none = run(partial, {});
  EXPECT_TRUE(none.plan.select_recompute.empty());
  ASSERT_EQ(none.plan.warnings.size(), 1u);
  EXPECT_EQ(none.plan.warnings[0], "select_module pattern 'linear_fc' did not match any module");
}

TEST(MemoryPolicy, ExcludeOpKeepsThoseOutputsAndStaysIdentical) {
  RecomputeOptions rc;
  rc.mode = RecomputeOptions::Mode::full;
  rc.full_layers = all_layers();
  rc.exclude_ops = {"LINEAR"};  // case-insensitive substring
  expect_identical(run({}, {}), run(rc, {}));
  EXPECT_TRUE(op_is_excluded("linear", {"LINEAR"}));
  EXPECT_TRUE(op_is_excluded("InnerCommAllGather", {"allgather"}));
  EXPECT_TRUE(op_is_excluded("all_gather", {"AllGather"}));  // underscores do not count
  EXPECT_TRUE(op_is_excluded("UlyssesAllToAll", {"AllToAll"}));
  EXPECT_FALSE(op_is_excluded("swiglu", {"linear"}));
}

// memory_optimization.md "Key Behaviors of exclude_op": the forward output of a kept operator is
// retained from the first forward and reused by the recomputed one, which does not run it again;
// the activations held between forward and backward grow by exactly those outputs, and the
// grads stay those of no recompute. Full and select modes alike.
TEST(MemoryPolicy, ExcludeOpReusesTheKeptOperatorsOutputInTheRecompute) {
  const Result base = run({}, {});
  RecomputeOptions full;
  full.mode = RecomputeOptions::Mode::full;
  full.full_layers = all_layers();
  const Result recomputed = run(full, {});
  EXPECT_EQ(recomputed.gathers_total, 2 * recomputed.gathers_forward);  // re-issued in backward
  full.exclude_ops = {"AllGather"};
  const Result kept = run(full, {});
  expect_identical(base, kept);
  EXPECT_EQ(kept.gathers_forward, kLayers);
  EXPECT_EQ(kept.gathers_total, kept.gathers_forward);  // not re-issued
  // One [8, 2 x 16] fp32 gather output per layer stays alive.
  EXPECT_EQ(kept.held_after_forward - recomputed.held_after_forward, kLayers * 8 * 2 * kDim * 4);

  RecomputeOptions select;
  select.mode = RecomputeOptions::Mode::select;
  select.select = {{"self_attention", all_layers()}};
  select.exclude_ops = {"all_gather"};  // the same operator
  const Result selected = run(select, {});
  expect_identical(base, selected);
  EXPECT_EQ(selected.gathers_total, selected.gathers_forward);
}

TEST(MemoryPolicy, CommunicationRecomputeRerunsTheOperationOnly) {
  RecomputeOptions rc;
  rc.comm_enable = true;
  rc.comm_select = {{".*\\.all_gather", {0, 1}}, {"self_attention", {2}}};
  Result comm = run(rc, {});
  expect_identical(run({}, {}), comm);
  EXPECT_EQ(comm.plan.comm_recompute.at(0), std::vector<std::string>{"self_attention.linear_q.all_gather"});
  EXPECT_EQ(comm.plan.comm_recompute.count(2), 0u);
  // two layers re-ran their gather in backward
  EXPECT_EQ(comm.gathers_total, comm.gathers_forward + 2);
  // a module matched instead of an operation: the documented warning
  ASSERT_FALSE(comm.plan.warnings.empty());
  EXPECT_EQ(comm.plan.warnings[0],
            "layers.2.self_attention is expected to be operation but got cell, this configuration will not be effective");
}

TEST(MemoryPolicy, LayerSwapMovesActivationsToTheHostPoolAndPrefetches) {
  Result base = run({}, {});
  SwapOptions sw;
  sw.enable = true;
  sw.prefetch = 1;
  sw.layers = {0, 1, 2};
  Result swapped = run({}, sw);
  expect_identical(base, swapped);
  EXPECT_GT(swapped.swap.bytes_swapped, 0);
  EXPECT_GT(swapped.swap.prefetch_hits, 0);
  // The swapped activations left the device between forward and backward.
  EXPECT_LT(swapped.held_after_forward, base.held_after_forward);
  EXPECT_GE(base.held_after_forward - swapped.held_after_forward, swapped.swap.bytes_swapped / 2);
}

TEST(MemoryPolicy, OpSwapOfAttentionIsIdentical) {
  SwapOptions sw;
  sw.enable = true;
  sw.op_swap = {{".*attention", {0, 1, 2}}};
  Result r = run({}, sw);
  expect_identical(run({}, {}), r);
  EXPECT_EQ(r.plan.op_swap.at(1), std::vector<std::string>{"self_attention"});
  EXPECT_GT(r.swap.tensors_swapped, 0);
}

// The options come from the configuration, which checks every rule it can without the model
// (tests/config/test_memory_rules.cpp: full_recompute_layer, select_module, prefetch range, ...);
// options breaking one are a bug, refused without a message of their own.
TEST(MemoryPolicy, OptionsTheConfigurationRejectsAreRefused) {
  Model m(kLayers, kDim);
  auto refs = m.layer_refs();
  auto expect_refused = [&](const RecomputeOptions& rc, const SwapOptions& sw) {
    try {
      plan_memory(refs, kLayers, rc, sw);
      ADD_FAILURE() << "expected an internal error";
    } catch (const ConfigError& e) {
      ADD_FAILURE() << "re-validated as a configuration problem: " << e.what();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("internal error"), std::string::npos) << e.what();
    }
  };
  RecomputeOptions full;
  full.mode = RecomputeOptions::Mode::full;
  expect_refused(full, {});
  RecomputeOptions sel;
  sel.mode = RecomputeOptions::Mode::select;
  expect_refused(sel, {});
  RecomputeOptions comm;
  comm.comm_enable = true;
  expect_refused(comm, {});
  SwapOptions sw;
  sw.enable = true;
  sw.prefetch = 4;
  expect_refused({}, sw);
  sw.prefetch = 2;
  sw.layers = {2};
  expect_refused({}, sw);
  sw.layers = {1};
  EXPECT_NO_THROW(plan_memory(refs, kLayers, {}, sw));
}

// What only the module tree shows: a module both recomputed and swapped.
TEST(MemoryPolicy, ValidationMessages) {
  Model m(kLayers, kDim);
  auto refs = m.layer_refs();
  auto expect_error = [&](const RecomputeOptions& rc, const SwapOptions& sw, const std::string& text) {
    try {
      plan_memory(refs, kLayers, rc, sw);
      ADD_FAILURE() << "expected ConfigError containing: " << text;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  RecomputeOptions full;
  full.mode = RecomputeOptions::Mode::full;
  RecomputeOptions sel;
  sel.mode = RecomputeOptions::Mode::select;
  // overlaps: full + layer swap; select mlp + op swap of its child
  full.full_layers = {1};
  SwapOptions layer1;
  layer1.enable = true;
  layer1.layers = {1};
  expect_error(full, layer1, "recompute and swap overlap on layer 1: the whole layer (full_recompute_layer) is recomputed");
  sel.select = {{"mlp", {0}}};
  SwapOptions child;
  child.enable = true;
  child.op_swap = {{"mlp\\.linear_fc2", {0}}};
  expect_error(sel, child, "module 'mlp' (select_module) is recomputed and module 'mlp.linear_fc2' (op_swap) is swapped");
  RecomputeOptions bad;
  bad.mode = RecomputeOptions::Mode::select;
  bad.select = {{"(mlp", {0}}};
  expect_error(bad, {}, "recompute.select_module: '(mlp' is not a valid regular expression");
}
