// Muon on sharded parameters across processes (spec training_hyperparameters.md §1.2
// `comm_strategy`; MindFormers' muon.py). The optimizer is isolated from forward/backward: every
// step hands both runs the same gradients (a function of name, step and global index), so "bitwise"
// is the claim. Each rank steps the one-process Muon on the whole model beside its sharded Muon and
// compares its own pieces, for both strategies, under FSDP, HSDP and hand-written tensor-parallel
// placements with FSDP on top, with QK-clip firing on heads whose rows are spread over ranks; at 3
// ranks some holders hold nothing. Classic bugs each case would catch: Newton–Schulz on a shard,
// the split schema applied to the local shape, an owner outside its holders (a hang), momentum kept
// only on the owner.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>

#include "../../dist/dist_test_util.h"
#include "loom/dist/fsdp.h"
#include "loom/dist/runtime.h"
#include "loom/dist/tensor_parallel.h"
#include "loom/models/muon_info.h"
#include "loom/optim/muon.h"
#include "loom/train/model_hooks.h"
#include "loom/train/finite_state.h"
#include "loom/optim/placement_muon_sharding.h"

namespace loom::train {
namespace {

using loom::testing::Json;
using optim::Muon;
using optim::MuonOptions;
using optim::PlacementMuonSharding;
using optim::matrix_split_axes;

dist::Runtime& rt() { return *dist::Runtime::get(); }

Tensor box(const Tensor& t, const std::vector<int64_t>& offset, const Shape& shape) {
  Tensor v = t;
  for (int d = 0; d < t.dim(); ++d) v = v.narrow(d, offset[d], shape[d]);
  return v;
}

// This rank's part of a whole tensor, by the parameter's placement.
Tensor local_of(const Tensor& whole, const nn::Parameter& p) {
  Tensor out = Tensor::empty(p.local_shape(), whole.dtype());
  for (const nn::Piece& piece : p.pieces())
    box(out, piece.local_offset, piece.shape).copy_(box(whole, piece.global_offset, piece.shape));
  return out;
}

// The same gradient on every rank and layout: a function of the name, the step and the index.
Tensor whole_grad(const std::string& name, const Shape& shape, int step) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  const RngState key{std::hash<std::string>{}(name), 40 + static_cast<uint64_t>(step), 0};
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(2.0 * stream_uniform(key, static_cast<int64_t>(i)) - 1.0);
  return Tensor::from_vector(v, shape);
}

void expect_bitwise(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto a = got.contiguous().to_float_vector(), b = want.contiguous().to_float_vector();
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i]))
        << what << " [" << i << "] " << a[i] << " vs " << b[i];
}

// What tensor parallelism would leave on tp rank r of 2 (column-parallel by heads, row-parallel,
// fc1's gate and up halves split like the two tensors they fuse, expert matrices split along
// their ffn dim), recorded in the placements before FSDP shards the result along dim 0.
struct HandSplit {
  std::string name;
  int dim;
  std::function<std::vector<nn::IndexRange>(int)> ranges;
};
const std::vector<HandSplit>& hand_tp_splits() {
  static const std::vector<HandSplit> splits = {
      {"decoder.layers.0.self_attention.linear_qb.weight", 0, [](int r) { return std::vector<nn::IndexRange>{{6 * r, 6}}; }},
      {"decoder.layers.1.self_attention.linear_kvb.weight", 0, [](int r) { return std::vector<nn::IndexRange>{{8 * r, 8}}; }},
      {"decoder.layers.0.self_attention.linear_proj.weight", 1, [](int r) { return std::vector<nn::IndexRange>{{4 * r, 4}}; }},
      {"decoder.layers.0.mlp.linear_fc1.weight", 0,
       [](int r) { return std::vector<nn::IndexRange>{{10 * r, 10}, {20 + 10 * r, 10}}; }},
      {"decoder.layers.1.mlp.experts.weight1", 2,
       [](int r) { return std::vector<nn::IndexRange>{{3 * r, 3}, {6 + 3 * r, 3}}; }},
      {"decoder.layers.1.mlp.experts.weight2", 1, [](int r) { return std::vector<nn::IndexRange>{{3 * r, 3}}; }}};
  return splits;
}

struct Layout {
  dist::ParallelDegrees degrees;
  bool hand_tp = false;  // the hand-written splits above
  bool real_tp = false;  // dist::apply_tensor_parallel's own splits
};

// One rank's pair: the whole model with one-process Muon, and the sharded model with Muon over
// PlacementMuonSharding.
struct Pair {
  models::BuiltModel whole, sharded;
  std::shared_ptr<dist::DeviceMesh> mesh;
  std::shared_ptr<dist::FullyShardedModel> fsdp;
  std::shared_ptr<PlacementMuonSharding> sharding;
  std::unique_ptr<Muon> one, many;
};

std::unique_ptr<Pair> make_pair(const Layout& layout, const std::string& strategy) {
  const Json section = loom::testing::dist_tiny_deepseek_v3();
  auto p = std::make_unique<Pair>();
  p->whole = models::build_model(section);
  p->sharded = models::build_model(section);
  p->whole.model->materialize(17);
  p->mesh = std::make_shared<dist::DeviceMesh>(rt().world(), dist::ParallelDims::infer(rt().world_size(), layout.degrees));
  if (layout.hand_tp) {
    const int tp_rank = p->mesh->coordinates().tp;
    for (const HandSplit& s : hand_tp_splits()) {
      nn::Parameter* param = p->sharded.model->find_parameter(s.name);
      EXPECT_NE(param, nullptr) << s.name;
      if (!param) continue;
      param->placement.add(param->global_shape, nn::AxisPlacement::shard("tp", s.dim, s.ranges(tp_rank)));
      param->tensor = Tensor::empty(param->local_shape(), param->dtype, Device::meta());
      param->tensor.set_requires_grad(true);
    }
  }
  if (layout.real_tp) dist::apply_tensor_parallel(*p->sharded.model, *p->mesh);
  p->fsdp = dist::apply_fsdp(*p->sharded.model, p->mesh, {});
  p->fsdp->materialize(17);

  MuonOptions o;
  o.comm_strategy = strategy;
  o.learning_rate = 0.02;
  const optim::MuonModelInfo info = muon_model_info(p->whole.args);
  optim::NamedParams whole_params, local_params;
  for (auto& [name, param] : p->whole.model->named_parameters()) whole_params.push_back({name, param->tensor});
  for (auto& [name, t] : p->sharded.model->local_parameters()) local_params.push_back({name, t});
  p->one = std::make_unique<Muon>(whole_params, o, info);
  p->sharding = PlacementMuonSharding::of_module(*p->sharded.model, p->mesh);
  p->many = std::make_unique<Muon>(local_params, o, info, false, optim::WeightDecayRules{}, p->sharding);
  return p;
}

// QK-clip inputs per global head: some heads of every MLA layer above the threshold.
std::vector<optim::QkClipLayer> hot_heads(const models::ModelArgs& args) {
  std::vector<optim::QkClipLayer> layers;
  float hot = 150.f;
  for (const auto& n : models::muon_model_facts(args).qk_clip_layers) {
    layers.push_back({n.q_up_name, n.kv_up_name, {hot, 20.f}});
    std::swap(layers.back().max_logits[0], layers.back().max_logits[static_cast<size_t>(n.layer % 2)]);
    hot *= 2;
  }
  return layers;
}

// Three steps with the same gradients (QK-clip on the second); then every local tensor and
// muon_m shard must be the bits of the one-process run at the same global positions.
void step_and_compare(Pair& p, bool qk_clip) {
  for (int step = 0; step < 3; ++step) {
    for (auto& [name, param] : p.whole.model->named_parameters()) {
      if (!param->trainable) continue;
      const Tensor g = whole_grad(name, param->global_shape, step);
      param->tensor.set_grad(g);
      Tensor local = p.sharded.model->find_parameter(name)->local();
      local.set_grad(local_of(g, *p.sharded.model->find_parameter(name)));
    }
    if (qk_clip && step == 1) {
      p.one->set_qk_clip_inputs(hot_heads(p.whole.args));
      p.many->set_qk_clip_inputs(hot_heads(p.whole.args));
    }
    p.one->step();
    p.many->step();
    if (qk_clip && step == 1) {
      ASSERT_TRUE(p.many->last_qk_clip().fired);
      EXPECT_EQ(p.many->last_qk_clip().heads_clipped, p.one->last_qk_clip().heads_clipped);
    }
  }
  const auto one_state = p.one->state_dict(), many_state = p.many->state_dict();
  for (auto& [name, param] : p.sharded.model->named_parameters()) {
    const nn::Parameter& whole = *p.whole.model->find_parameter(name);
    expect_bitwise(param->local(), local_of(whole.tensor, *param), name + " after 3 steps");
    if (many_state.count("muon_m." + name))
      expect_bitwise(many_state.at("muon_m." + name), local_of(one_state.at("muon_m." + name), *param),
                     "muon_m." + name);
  }
}

void run_layout(const Layout& layout, bool qk_clip) {
  for (const char* strategy : {"allgather", "allgather_deredundency"}) {
    SCOPED_TRACE(strategy);
    auto p = make_pair(layout, strategy);
    ASSERT_GT(p->sharding->num_matrices(), 0u);  // something is split, so something is exchanged
    step_and_compare(*p, qk_clip);
  }
}

TEST(MuonShardingMpi, FsdpShardsFollowOneProcessBitForBit) {
  run_layout({dist::ParallelDegrees{}, false}, false);
  // At 3 ranks FSDP's rows run out before the last rank on small weights (the router's 4 rows
  // are 2 + 2 + 0): a holder with nothing still takes part, and may be the owner.
  auto p = make_pair({dist::ParallelDegrees{}, false}, "allgather_deredundency");
  int64_t empty = 0;
  for (size_t j = 0; j < p->sharding->num_matrices(); ++j)
    empty += p->sharded.model->find_parameter(p->sharding->name(j))->local().numel() == 0 ? 1 : 0;
  const int64_t empty_anywhere = rt().world()->all_reduce_scalar(empty);
  if (rt().world_size() == 3) {
    EXPECT_GT(empty_anywhere, 0);
  }
}

// QK-clip under sharding: at 2 ranks each holds one head of the up-projections,
// at 4 a head's rows straddle two ranks.
TEST(MuonShardingMpi, QkClipOnShardedHeadsFollowsOneProcess) {
  run_layout({dist::ParallelDegrees{}, false}, true);
}

TEST(MuonShardingMpi, HsdpFollowsOneProcess) {
  if (rt().world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  dist::ParallelDegrees d;
  d.data_parallel_shard = 2;
  run_layout({d, false}, true);
}

TEST(MuonShardingMpi, TensorParallelPlacementsUnderFsdpFollowOneProcess) {
  if (rt().world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  dist::ParallelDegrees d;
  d.tensor_parallel = 2;  // tp 2 × fsdp 2
  run_layout({d, true}, true);
  // The split experts keep their FSDP batch split: their holders are the tp pair only.
  auto p = make_pair({d, true}, "allgather");
  const dist::ParallelDims& dims = p->mesh->dims();
  const nn::Parameter& w1 = *p->sharded.model->find_parameter("decoder.layers.1.mlp.experts.weight1");
  EXPECT_EQ(matrix_split_axes({"w1", w1.global_shape, w1.placement}, dims), (std::vector<std::string>{"tp"}));
  const nn::Parameter& fc1 = *p->sharded.model->find_parameter("decoder.layers.0.mlp.linear_fc1.weight");
  EXPECT_EQ(matrix_split_axes({"fc1", fc1.global_shape, fc1.placement}, dims), (std::vector<std::string>{"tp", "fsdp"}));
}

// The splits dist::apply_tensor_parallel itself makes (qb/kvb by heads, linear_proj and fc2 by
// columns, fc1 by gate/up blocks): tp 2 alone at 2 ranks, with FSDP on top at 4.
TEST(MuonShardingMpi, TensorParallelStrategyUnderFsdpFollowsOneProcess) {
  if (rt().world_size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  dist::ParallelDegrees d;
  d.tensor_parallel = 2;
  run_layout({d, false, true}, true);
}

// allgather_deredundency: every matrix has exactly one owner in each holder group, and
// Newton–Schulz runs there only; allgather runs it on every holder.
TEST(MuonShardingMpi, DeredundancyRunsNewtonSchulzOncePerMatrix) {
  dist::ParallelDegrees d;
  const bool hand_tp = rt().world_size() == 4;
  if (hand_tp) d.tensor_parallel = 2;
  auto gather = make_pair({d, hand_tp}, "allgather");
  auto owned = make_pair({d, hand_tp}, "allgather_deredundency");
  step_and_compare(*gather, false);
  step_and_compare(*owned, false);
  const int me = rt().rank();
  int64_t mine = 0, others = 0;
  double per_holder = 0;  // Σ batch/holders: summed over the world, one run per holder group
  ASSERT_EQ(gather->sharding->num_matrices(), owned->sharding->num_matrices());
  for (size_t j = 0; j < owned->sharding->num_matrices(); ++j) {
    const std::vector<int> holders = owned->sharding->holders(j);
    const int owner = owned->sharding->owner(j);
    EXPECT_NE(std::find(holders.begin(), holders.end(), owner), holders.end()) << owned->sharding->name(j);
    EXPECT_EQ(gather->sharding->owner(j), -1);
    EXPECT_EQ(gather->sharding->holders(j), holders);
    const nn::Parameter& param = *owned->sharded.model->find_parameter(owned->sharding->name(j));
    const int64_t batch = param.global_shape.ndim() == 3 ? param.local_shape()[0] : 1;  // whole matrices
    (owner == me ? mine : others) += batch;
    per_holder += static_cast<double>(batch) / static_cast<double>(holders.size());
  }
  EXPECT_EQ(gather->many->last_step_stats().ns_matrices - owned->many->last_step_stats().ns_matrices, others);
  EXPECT_EQ(rt().world()->all_reduce_scalar(mine),
            static_cast<int64_t>(std::llround(rt().world()->all_reduce_scalar(per_holder))));
  EXPECT_GT(owned->sharding->comm_stats().bytes_sent + owned->sharding->comm_stats().bytes_received, 0);
}

// The non-finite guard under sharding: at step 1 a gradient whose square overflows fp32 sits in
// one rank's shard of the word embeddings (an AdamW-fallback parameter). Each rank's verdict is
// agreed over the world, so every rank skips step 1, the Newton–Schulz exchange of the split
// matrices included, and nothing is written anywhere; the one-process run skips it by itself.
// After step 2 every shard is still the bits of the one-process run.
TEST(MuonShardingMpi, OneRanksOverflowSkipsTheStepOnEveryRank) {
  auto p = make_pair({dist::ParallelDegrees{}, false}, "allgather");
  std::shared_ptr<dist::ProcessGroup> world = rt().world();
  p->many->set_finite_agreement([world](const std::string& local) { return agreed_non_finite(local, *world); });
  const std::string embedding = "embedding.word_embeddings.weight";
  ASSERT_NE(p->sharded.model->find_parameter(embedding), nullptr);
  for (int step = 0; step < 3; ++step) {
    int64_t holders = 0;
    for (auto& [name, param] : p->whole.model->named_parameters()) {
      if (!param->trainable) continue;
      Tensor g = whole_grad(name, param->global_shape, step);
      if (step == 1 && name == embedding) {
        std::vector<float> v = g.to_float_vector();
        v.back() = 1e30f;
        g = Tensor::from_vector(v, param->global_shape);
      }
      param->tensor.set_grad(g);
      Tensor local = p->sharded.model->find_parameter(name)->local();
      const Tensor local_grad = local_of(g, *p->sharded.model->find_parameter(name));
      for (float x : local_grad.to_float_vector()) holders += x == 1e30f ? 1 : 0;
      local.set_grad(local_grad);
    }
    const auto before = p->many->state_dict();
    std::map<std::string, std::vector<float>> kept;
    for (const auto& [name, t] : before) kept[name] = t.to_float_vector();
    for (auto& [name, t] : p->sharded.model->local_parameters()) kept["param." + name] = t.to_float_vector();
    p->one->step();
    p->many->step();
    if (step != 1) {
      EXPECT_EQ(p->many->last_skip(), "");
      continue;
    }
    EXPECT_EQ(world->all_reduce_scalar(holders), 1);  // one rank's shard holds the overflow
    EXPECT_NE(p->one->last_skip(), "");
    EXPECT_NE(p->many->last_skip(), "") << "rank " << world->rank() << " wrote its update";
    for (const auto& [name, t] : p->many->state_dict())
      if (name != "global_step")  // the step still counts
        expect_bitwise(t, Tensor::from_vector(kept.at(name), t.shape(), t.dtype()), name + " after the skipped step");
    for (auto& [name, t] : p->sharded.model->local_parameters())
      expect_bitwise(t, Tensor::from_vector(kept.at("param." + name), t.shape(), t.dtype()), name + " after the skipped step");
  }
  const auto one_state = p->one->state_dict(), many_state = p->many->state_dict();
  for (auto& [name, param] : p->sharded.model->named_parameters()) {
    const nn::Parameter& whole = *p->whole.model->find_parameter(name);
    expect_bitwise(param->local(), local_of(whole.tensor, *param), name + " after 3 steps");
    if (many_state.count("muon_m." + name))
      expect_bitwise(many_state.at("muon_m." + name), local_of(one_state.at("muon_m." + name), *param),
                     "muon_m." + name);
  }
}

}  // namespace
}  // namespace loom::train
