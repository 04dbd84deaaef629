// The seams strategies attach to in attention (dist/tensor_parallel.h, dist/context_parallel.h):
// head counts come from the weights, so a layer holding a head shard of its weights computes
// exactly those heads (the partial outputs add up to the full layer's); the core attention sits
// between the projections and linear_proj, can be replaced from outside (context parallelism) and
// keeps the QK-clip max logits per local head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "loom/autograd/checkpoint.h"
#include "loom/autograd/engine.h"
#include "loom/autograd/grad_mode.h"
#include "loom/nn/attention.h"
#include "loom/nn/mla.h"
#include "loom/ops/attention.h"
#include "loom/ops/reduce.h"
#include "loom/ops/shape.h"
#include "nn_test_util.h"
#include "testing/gradcheck.h"

using namespace loom;
using namespace loom::nn;
using loom::testing::random_f64;
using loom::testing::tiny_f64_config;

namespace {

// Points `name` of `shard` at [start, start + length) along `dim` of the same parameter of
// `full`, the way a tensor-parallel strategy replaces a parameter by its shard.
void take_shard(Module& shard, Module& full, const std::string& name, int dim, int64_t start, int64_t length) {
  Tensor t = full.find_parameter(name)->tensor.detach().narrow(dim, start, length).clone();
  t.set_requires_grad(true);
  shard.find_parameter(name)->tensor = t;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << what << " [" << i << "]";
}

// Records the last output of a module's forward.
void capture_output(Module& m, Tensor* out) {
  m.add_forward_wrapper([out](const TensorFn& inner, const std::vector<Tensor>& in) {
    std::vector<Tensor> r = inner(in);
    *out = r[0];
    return r;
  });
}

TransformerConfig gqa_config() {
  auto c = tiny_f64_config();
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 2;
  c.qk_layernorm = true;
  c.attention_bias = true;
  return c;
}

TransformerConfig mla_config(int64_t q_lora_rank) {
  auto c = tiny_f64_config();
  c.multi_latent_attention = true;
  c.rope_interleave = true;
  c.num_attention_heads = 4;
  c.q_lora_rank = q_lora_rank;
  c.kv_lora_rank = 5;
  c.qk_nope_head_dim = 3;
  c.qk_rope_head_dim = 2;
  c.v_head_dim = 2;
  return c;
}

}  // namespace

TEST(NnAttention, SelfAttentionOnAHeadShardComputesThoseHeads) {
  // Heads 4 of 2 dims over 2 kv heads: shard r keeps q heads [2r, 2r+2) and kv head r (whole GQA
  // groups, as MindFormers requires), linear_proj's matching columns; q/k norms stay replicated and
  // the row-parallel bias is added once (after the reduce, as MindFormers' RowwiseParallel).
  const auto c = gqa_config();
  auto rotary = std::make_shared<RotaryEmbedding>(c, c.head_dim);
  SelfAttention full(c, rotary);
  full.materialize(21);
  for (const char* n : {"linear_q.bias", "linear_k.bias", "linear_v.bias", "linear_proj.bias"})
    full.find_parameter(n)->tensor.copy_(random_f64(full.find_parameter(n)->global_shape, 22));
  full.find_parameter("q_layernorm.weight")->tensor.fill_(1.3);
  full.find_parameter("k_layernorm.weight")->tensor.fill_(0.7);
  full.core_attention().set_track_max_logits(true);
  Tensor full_core;
  capture_output(full.core_attention(), &full_core);

  Tensor x = random_f64({2, 5, 8}, 23);
  Tensor pos = Tensor::from_vector(std::vector<int64_t>{3, 4, 5, 6, 7, 0, 1, 2, 0, 1}, {2, 5});
  autograd::NoGradGuard no_grad;
  std::vector<double> want = full.forward(x, pos, Tensor()).to_double_vector();
  std::vector<double> sum(want.size(), 0.0);
  for (int64_t r = 0; r < 2; ++r) {
    SCOPED_TRACE("shard " + std::to_string(r));
    SelfAttention shard(c, rotary);
    shard.load_state_dict(full.state_dict());
    const int64_t d = c.head_dim;
    for (const char* n : {"linear_q.weight", "linear_q.bias"}) take_shard(shard, full, n, 0, 2 * r * d, 2 * d);
    for (const char* n : {"linear_k.weight", "linear_k.bias", "linear_v.weight", "linear_v.bias"})
      take_shard(shard, full, n, 0, r * d, d);
    take_shard(shard, full, "linear_proj.weight", 1, 2 * r * d, 2 * d);
    if (r == 1) shard.find_parameter("linear_proj.bias")->tensor.zero_();
    shard.core_attention().set_track_max_logits(true);
    Tensor shard_core;
    capture_output(shard.core_attention(), &shard_core);

    std::vector<double> part = shard.forward(x, pos, Tensor()).to_double_vector();
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    // Before linear_proj the shard's heads are the full layer's heads 2r, 2r+1, bit for bit.
    ASSERT_EQ(shard_core.shape(), Shape({2, 5, 2, d}));
    EXPECT_EQ(shard_core.to_double_vector(), full_core.narrow(2, 2 * r, 2).contiguous().to_double_vector());
    // QK-clip statistics are per local head.
    std::vector<float> full_max = full.core_attention().max_logits().to_float_vector();
    EXPECT_EQ(shard.core_attention().max_logits().to_float_vector(),
              std::vector<float>(full_max.begin() + 2 * r, full_max.begin() + 2 * r + 2));
  }
  expect_near(sum, want, 1e-12, "sum of the shards' partial outputs");
}

TEST(NnAttention, MlaOnAHeadShardComputesThoseHeads) {
  for (int64_t q_lora_rank : {6, 0}) {
    SCOPED_TRACE("q_lora_rank " + std::to_string(q_lora_rank));
    const auto c = mla_config(q_lora_rank);
    auto rotary = std::make_shared<RotaryEmbedding>(c, c.qk_rope_head_dim);
    MLASelfAttention full(c, rotary);
    full.materialize(31);
    Tensor full_core;
    capture_output(full.core_attention(), &full_core);
    Tensor x = random_f64({2, 4, 8}, 32);
    autograd::NoGradGuard no_grad;
    std::vector<double> want = full.forward(x, Tensor(), Tensor()).to_double_vector();
    // Shard r: heads [2r, 2r+2) of the up-projections (MindFormers' MLA plan, whole heads of
    // [q_nope; q_pe] and [k_nope; v] rows) and linear_proj's columns; the down-projections, their
    // norms and the shared rope key stay replicated.
    const std::string q_up = q_lora_rank > 0 ? "linear_qb.weight" : "linear_q.weight";
    const int64_t qk = c.qk_nope_head_dim + c.qk_rope_head_dim, kv = c.qk_nope_head_dim + c.v_head_dim;
    std::vector<double> sum(want.size(), 0.0);
    for (int64_t r = 0; r < 2; ++r) {
      MLASelfAttention shard(c, rotary);
      shard.load_state_dict(full.state_dict());
      take_shard(shard, full, q_up, 0, 2 * r * qk, 2 * qk);
      take_shard(shard, full, "linear_kvb.weight", 0, 2 * r * kv, 2 * kv);
      take_shard(shard, full, "linear_proj.weight", 1, 2 * r * c.v_head_dim, 2 * c.v_head_dim);
      Tensor shard_core;
      capture_output(shard.core_attention(), &shard_core);
      std::vector<double> part = shard.forward(x, Tensor(), Tensor()).to_double_vector();
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
      EXPECT_EQ(shard_core.to_double_vector(), full_core.narrow(2, 2 * r, 2).contiguous().to_double_vector());
    }
    expect_near(sum, want, 1e-12, "sum of the shards' partial outputs");
  }
}

TEST(NnAttention, ShardsThatCutHeadsOrDisagreeAreRejectedByName) {
  const auto c = mla_config(6);
  auto rotary = std::make_shared<RotaryEmbedding>(c, c.qk_rope_head_dim);
  MLASelfAttention full(c, rotary), shard(c, rotary);
  full.materialize(41);
  shard.materialize(41);
  Tensor x = random_f64({1, 3, 8}, 42);
  autograd::NoGradGuard no_grad;
  // Two heads of linear_qb but all four of linear_kvb.
  take_shard(shard, full, "linear_qb.weight", 0, 0, 2 * 5);
  try {
    shard.forward(x, Tensor(), Tensor());
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("MLA: linear_kvb gives 4 heads but linear_qb gives 2"), std::string::npos)
        << e.what();
  }
  // Seven rows hold no whole number of 5-row heads.
  take_shard(shard, full, "linear_qb.weight", 0, 0, 7);
  try {
    shard.forward(x, Tensor(), Tensor());
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("linear_qb output [1, 3, 7] does not hold whole heads of 5"),
              std::string::npos)
        << e.what();
  }
}

TEST(NnAttention, CoreAttentionSitsBetweenTheProjectionsAndTakesTheirHeads) {
  const auto c = gqa_config();
  auto rotary = std::make_shared<RotaryEmbedding>(c, c.head_dim);
  SelfAttention attn(c, rotary);
  Module* core = attn.find_module("core_attention");
  ASSERT_EQ(core, &attn.core_attention());
  EXPECT_EQ(core->type_name(), "CoreAttention");
  EXPECT_TRUE(core->named_parameters().empty());
  attn.materialize(51);
  std::vector<Shape> seen;
  attn.core_attention().add_forward_wrapper([&seen](const TensorFn& inner, const std::vector<Tensor>& in) {
    for (size_t i = 0; i < 3; ++i) seen.push_back(in[i].shape());
    EXPECT_EQ(in[3].to_int_vector(), (std::vector<int64_t>{2, 5}));  // the layer's doc_ends
    return inner(in);
  });
  Tensor doc_ends = Tensor::from_vector(std::vector<int64_t>{2, 5}, {1, 2});
  autograd::NoGradGuard no_grad;
  attn.forward(random_f64({1, 5, 8}, 52), Tensor(), doc_ends);
  EXPECT_EQ(seen, (std::vector<Shape>{{1, 5, 4, 2}, {1, 5, 2, 2}, {1, 5, 2, 2}}));

  // MLA hands its YaRN-scaled softmax scale to its core attention (DeepSeek-V3).
  auto m = mla_config(6);
  m.rope_scaling.kind = ops::RopeScaling::Kind::yarn;
  m.rope_scaling.factor = 4;
  m.rope_scaling.original_max_position_embeddings = 4;
  m.rope_scaling.mscale = 1;
  m.rope_scaling.mscale_all_dim = 1;
  MLASelfAttention mla(m, std::make_shared<RotaryEmbedding>(m, m.qk_rope_head_dim));
  const double ms = 0.1 * std::log(4.0) + 1;
  EXPECT_NEAR(mla.core_attention().options().softmax_scale, ms * ms / std::sqrt(5.0), 1e-15);
  EXPECT_TRUE(mla.core_attention().options().causal);
}

// The latent norms use epsilon 1e-6 whatever rms_norm_eps says (transformers' and DeepSeek's
// q_a_layernorm / kv_a_layernorm): MLA, which has no other norm, computes the same output with
// norm_epsilon 0.5 as with 1e-6 (before, 0.5 changed every output).
TEST(NnAttention, MlaLatentNormsIgnoreRmsNormEps) {
  auto c = mla_config(6);
  auto rotary = std::make_shared<RotaryEmbedding>(c, c.qk_rope_head_dim);
  MLASelfAttention usual(c, rotary);
  usual.materialize(31);
  c.norm_epsilon = 0.5;
  MLASelfAttention loose(c, rotary);
  loose.load_state_dict(usual.state_dict());
  Tensor x = random_f64({2, 4, 8}, 32);
  autograd::NoGradGuard no_grad;
  EXPECT_EQ(loose.forward(x, Tensor(), Tensor()).to_double_vector(), usual.forward(x, Tensor(), Tensor()).to_double_vector());
}

TEST(NnAttention, ContextParallelAttachesByReplacingTheCoreAttention) {
  // A one-process stand-in for all-gather-KV context parallelism (MindFormers' "colossal"): the
  // replaced forward runs each half of the queries against the whole K/V with q_offset, with the
  // options and QK-clip reporting the core attention exposes. The layer is unchanged.
  const auto c = gqa_config();
  auto rotary = std::make_shared<RotaryEmbedding>(c, c.head_dim);
  SelfAttention plain(c, rotary), split(c, rotary);
  plain.materialize(61);
  split.load_state_dict(plain.state_dict());
  plain.core_attention().set_track_max_logits(true);
  split.core_attention().set_track_max_logits(true);
  CoreAttention* core = &split.core_attention();
  int64_t calls = 0;
  core->add_forward_wrapper([core, &calls](const TensorFn&, const std::vector<Tensor>& in) {
    ++calls;
    const int64_t S = in[0].size(1), half = S / 2;
    std::vector<Tensor> parts;
    for (int64_t r = 0; r < 2; ++r) {
      ops::AttentionOptions opt;
      opt.softmax_scale = core->options().softmax_scale;
      opt.causal = core->options().causal;
      opt.q_offset = r * half;
      opt.track_max_logits = core->tracking_max_logits();
      Tensor step_max;
      parts.push_back(ops::attention(ops::narrow(in[0], 1, r * half, half), in[1], in[2], opt,
                                     opt.track_max_logits ? &step_max : nullptr));
      core->fold_max_logits(step_max);
    }
    return std::vector<Tensor>{ops::cat(parts, 1)};
  });
  Tensor x = random_f64({2, 6, 8}, 62);
  Tensor want, got;
  {
    autograd::NoGradGuard no_grad;
    want = plain.forward(x, Tensor(), Tensor());
    got = split.forward(x, Tensor(), Tensor());
  }
  EXPECT_EQ(calls, 1);
  expect_near(got.to_double_vector(), want.to_double_vector(), 1e-12, "query-split attention");
  expect_near(std::vector<double>(split.core_attention().max_logits().to_double_vector()),
              plain.core_attention().max_logits().to_double_vector(), 0.0, "max logits");
  // The gradient flows through the replaced forward too.
  Tensor xg = x.clone();
  xg.set_requires_grad(true);
  autograd::backward(ops::sum(split.forward(xg, Tensor(), Tensor())));
  Tensor xp = x.clone();
  xp.set_requires_grad(true);
  autograd::backward(ops::sum(plain.forward(xp, Tensor(), Tensor())));
  expect_near(xg.grad().to_double_vector(), xp.grad().to_double_vector(), 1e-12, "input grad");
}

TEST(NnAttention, MaxLogitsFoldPerHeadAndRecomputeDoesNotCountAgain) {
  const auto c = gqa_config();
  auto rotary = std::make_shared<RotaryEmbedding>(c, c.head_dim);
  SelfAttention attn(c, rotary);
  attn.materialize(71);
  CoreAttention& core = attn.core_attention();
  core.set_track_max_logits(true);
  Tensor x1 = random_f64({1, 4, 8}, 72, -2, 2), x2 = random_f64({1, 4, 8}, 73, -2, 2);
  auto max_after = [&](const std::vector<Tensor>& xs) {
    core.reset_max_logits();
    autograd::NoGradGuard no_grad;
    for (const Tensor& x : xs) attn.forward(x, Tensor(), Tensor());
    return core.max_logits().to_float_vector();
  };
  const std::vector<float> m1 = max_after({x1}), m2 = max_after({x2}), both = max_after({x1, x2});
  ASSERT_EQ(both.size(), 4u);
  for (size_t h = 0; h < 4; ++h) EXPECT_EQ(both[h], std::max(m1[h], m2[h])) << h;
  EXPECT_NE(m1, m2);

  // Recompute replays the forward during backward; the running maximum must not see it twice
  // (here: a reset before backward stays empty).
  core.reset_max_logits();
  Tensor x = x1.clone();
  x.set_requires_grad(true);
  auto out = autograd::checkpoint(
      [&attn](const std::vector<Tensor>& in) { return std::vector<Tensor>{attn.forward(in[0], Tensor(), Tensor())}; },
      {x});
  EXPECT_EQ(core.max_logits().to_float_vector(), m1);
  core.reset_max_logits();
  autograd::backward(ops::sum(out[0]));
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(core.max_logits().defined());
}
