// Tiny Llama / Qwen3 / Qwen3-MoE / DeepSeek-V3 built from their `model:` sections: parameter
// names (docs/models.md), forward + backward reaching every parameter, MTP and balance losses
// injected into backward but not into the logged loss (docs/models.md "Losses"), bf16 compute,
// tied vs untied heads, the head's grads-in-forward as the caller's choice.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "loom/autograd/engine.h"
#include "loom/core/allocator.h"
#include "loom/autograd/grad_mode.h"
#include "loom/models/registry.h"
#include "model_test_util.h"

using namespace loom;
using namespace loom::models;
using namespace loom::testing;

namespace {

std::set<std::string> names_of(nn::CausalLM& m) {
  std::set<std::string> out;
  for (auto& [n, t] : m.state_dict()) out.insert(n);
  return out;
}

// Forward + backward; every parameter gets a finite grad; returns the output.
nn::LMOutput train_step(nn::CausalLM& model, const nn::LMBatch& batch) {
  model.zero_grad();
  nn::LMOutput out = model.forward(batch);
  autograd::backward(out.loss);
  for (auto& [name, p] : model.named_parameters()) {
    EXPECT_TRUE(p->tensor.grad().defined()) << name << " got no gradient";
    if (!p->tensor.grad().defined()) continue;
    for (double g : p->tensor.grad().to_double_vector()) {
      EXPECT_TRUE(std::isfinite(g)) << name;
      if (!std::isfinite(g)) break;
    }
  }
  return out;
}

}  // namespace

TEST(Models, LlamaTiedForwardBackward) {
  BuiltModel b = build_model(tiny_llama());
  EXPECT_EQ(b.args.architecture, "LlamaForCausalLM");
  b.model->materialize(1);
  auto names = names_of(*b.model);
  EXPECT_TRUE(names.count("embedding.word_embeddings.weight"));
  EXPECT_TRUE(names.count("decoder.layers.1.self_attention.linear_proj.weight"));
  EXPECT_TRUE(names.count("decoder.layers.0.mlp.linear_fc1.weight"));
  EXPECT_TRUE(names.count("decoder.final_layernorm.weight"));
  EXPECT_FALSE(names.count("output_layer.weight"));  // tied: the head is the embedding
  EXPECT_FALSE(names.count("decoder.layers.0.self_attention.q_layernorm.weight"));
  nn::LMOutput out = train_step(*b.model, random_batch(24, 2, 6, 3));
  EXPECT_NEAR(out.loss.item(), std::log(24.0), 0.5);  // random init: about ln V
  EXPECT_FALSE(out.aux_loss.defined());
  EXPECT_FALSE(out.mtp_loss.defined());
}

TEST(Models, Qwen3UntiedWithQkNorm) {
  BuiltModel b = build_model(tiny_qwen3());
  b.model->materialize(2);
  auto names = names_of(*b.model);
  EXPECT_TRUE(names.count("output_layer.weight"));
  EXPECT_TRUE(names.count("decoder.layers.0.self_attention.q_layernorm.weight"));
  EXPECT_TRUE(names.count("decoder.layers.0.self_attention.k_layernorm.weight"));
  EXPECT_EQ(b.model->find_parameter("decoder.layers.0.self_attention.linear_q.weight")->global_shape,
            Shape({16, 16}));  // 2 heads × head_dim 8
  train_step(*b.model, random_batch(24, 2, 5, 4));
}

TEST(Models, Qwen3MoeForwardBackwardWithAuxLoss) {
  BuiltModel b = build_model(tiny_qwen3_moe());
  b.model->materialize(3);
  auto names = names_of(*b.model);
  EXPECT_TRUE(names.count("decoder.layers.0.mlp.linear_fc1.weight"));  // mlp_only_layers [0]
  EXPECT_TRUE(names.count("decoder.layers.1.mlp.router.weight"));
  EXPECT_TRUE(names.count("decoder.layers.1.mlp.experts.weight1"));
  EXPECT_FALSE(names.count("decoder.layers.1.mlp.router.expert_bias"));
  EXPECT_FALSE(names.count("decoder.layers.1.mlp.shared_experts.linear_fc1.weight"));
  nn::LMBatch batch = random_batch(24, 2, 6, 5);
  nn::LMOutput out = train_step(*b.model, batch);
  ASSERT_TRUE(out.aux_loss.defined());
  EXPECT_GT(out.aux_loss.item(), 0.0);
  EXPECT_FALSE(out.aux_loss.requires_grad());
  // Tokens per expert of this process: 12 tokens × top-2.
  auto moe = b.model->moe_layers();
  ASSERT_EQ(moe.size(), 1u);
  int64_t routed = 0;
  for (int64_t c : moe[0]->router().tokens_per_expert().to_int_vector()) routed += c;
  EXPECT_EQ(routed, 24);

  // The balance loss trains the router but is not part of the logged loss.
  Json no_aux = tiny_qwen3_moe();
  no_aux["router_aux_loss_coef"] = 0.0;
  BuiltModel plain = build_model(no_aux);
  plain.model->load_state_dict(b.model->state_dict());
  nn::LMOutput out2 = plain.model->forward(batch);
  EXPECT_EQ(out2.loss.item(), out.loss.item());
  EXPECT_FALSE(out2.aux_loss.defined());
}

TEST(Models, DeepseekV3MlaMoeMtpForwardBackward) {
  BuiltModel b = build_model(tiny_deepseek_v3());
  const ModelArgs& a = b.args;
  EXPECT_TRUE(a.multi_latent_attention);
  EXPECT_TRUE(a.rope_interleave);
  EXPECT_TRUE(a.moe_router_enable_expert_bias);  // topk_method noaux_tc
  EXPECT_EQ(a.score_function, nn::ScoreFunction::sigmoid);
  EXPECT_EQ(a.qk_rope_head_dim, 2);  // from the MindFormers alias qk_pos_emb_head_dim
  EXPECT_EQ(a.rope_scaling.kind, ops::RopeScaling::Kind::yarn);
  b.model->materialize(4);
  auto names = names_of(*b.model);
  for (const char* n : {"decoder.layers.0.mlp.linear_fc1.weight", "decoder.layers.0.self_attention.linear_qa.weight",
                        "decoder.layers.0.self_attention.q_layernorm.weight", "decoder.layers.0.self_attention.linear_qb.weight",
                        "decoder.layers.0.self_attention.linear_kva.weight", "decoder.layers.0.self_attention.kv_layernorm.weight",
                        "decoder.layers.0.self_attention.linear_kvb.weight", "decoder.layers.1.mlp.router.weight",
                        "decoder.layers.1.mlp.router.expert_bias", "decoder.layers.1.mlp.experts.weight2",
                        "decoder.layers.1.mlp.shared_experts.linear_fc1.weight", "mtp.layers.0.enorm.weight",
                        "mtp.layers.0.hnorm.weight", "mtp.layers.0.eh_proj.weight", "mtp.layers.0.final_layernorm.weight",
                        "mtp.layers.0.transformer_layer.mlp.experts.weight1", "output_layer.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_EQ(b.model->find_parameter("mtp.layers.0.eh_proj.weight")->global_shape, Shape({16, 32}));
  nn::LMBatch batch = random_batch(24, 2, 6, 6);
  nn::LMOutput out = train_step(*b.model, batch);
  ASSERT_TRUE(out.mtp_loss.defined());
  ASSERT_EQ(out.mtp_losses.size(), 1u);
  EXPECT_NEAR(out.mtp_loss.item(), 0.3 * out.mtp_losses[0].item(), 1e-7);  // (λ/D)·Σ CE_k
  ASSERT_TRUE(out.aux_loss.defined());
  EXPECT_EQ(b.model->moe_layers().size(), 2u);  // decoder layer 1 and the MTP layer

  // Without the injected gradients (scale 0) MTP parameters get zero grads and the logged loss is
  // the same: MTP is not added to it.
  Tensor grad_with = b.model->find_parameter("decoder.layers.0.self_attention.linear_qa.weight")->tensor.grad().clone();
  b.model->set_auxiliary_loss_grad_scale(0.0);
  b.model->zero_grad();
  nn::LMOutput out0 = b.model->forward(batch);
  EXPECT_EQ(out0.loss.item(), out.loss.item());
  autograd::backward(out0.loss);
  Tensor eh = b.model->find_parameter("mtp.layers.0.eh_proj.weight")->tensor.grad();
  for (double g : eh.defined() ? eh.to_double_vector() : std::vector<double>{}) EXPECT_EQ(g, 0.0);
  EXPECT_NE(b.model->find_parameter("decoder.layers.0.self_attention.linear_qa.weight")->tensor.grad().to_double_vector(),
            grad_with.to_double_vector());

  // The aux-loss-free update moves the expert bias of every MoE layer and resets the counters.
  b.model->update_expert_biases();
  std::vector<double> bias = b.model->moe_layers()[0]->router().expert_bias().to_double_vector();
  double moved = 0;
  for (double v : bias) moved += std::abs(v);
  EXPECT_GT(moved, 0.0);
  for (int64_t c : b.model->moe_layers()[0]->router().tokens_per_expert().to_int_vector()) EXPECT_EQ(c, 0);
}

TEST(Models, Bf16ComputeTracksFloat32) {
  // other_training_features.md §4: fp32 parameters, bf16 activations; kernels compute in fp32.
  Json f32 = tiny_qwen3();
  Json bf16 = tiny_qwen3();
  bf16["compute_dtype"] = "bfloat16";
  BuiltModel a = build_model(f32), b = build_model(bf16);
  a.model->materialize(7);
  b.model->load_state_dict(a.model->state_dict());
  nn::LMBatch batch = random_batch(24, 2, 6, 8);
  nn::LMOutput oa = a.model->forward(batch);
  nn::LMOutput ob = train_step(*b.model, batch);
  EXPECT_EQ(ob.loss.dtype(), DType::f32);
  EXPECT_NE(ob.loss.item(), oa.loss.item());
  EXPECT_NEAR(ob.loss.item(), oa.loss.item(), 2e-2);
  // Main grads stay fp32 for fp32 parameters.
  EXPECT_EQ(b.model->find_parameter("output_layer.weight")->tensor.grad().dtype(), DType::f32);
}

TEST(Models, PositionIdsAndDocumentEndsAreHonoured) {
  BuiltModel b = build_model(tiny_llama());
  b.model->materialize(9);
  nn::LMBatch batch = random_batch(24, 1, 6, 10);
  autograd::NoGradGuard ng;
  const double plain = b.model->forward(batch).loss.item();
  batch.position_ids = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3, 4, 5}, {1, 6});
  EXPECT_EQ(b.model->forward(batch).loss.item(), plain);
  // Two packed documents [0,3) [3,6) with restarting positions: differs from one long document.
  batch.position_ids = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 0, 1, 2}, {1, 6});
  batch.doc_ends = Tensor::from_vector(std::vector<int32_t>{3, 6}, {1, 2});
  const double packed = b.model->forward(batch).loss.item();
  EXPECT_NE(packed, plain);
  // ... and the second document alone gives the same per-token results as a fresh sequence.
  Tensor doc = b.model->logits(batch.input_ids, batch.position_ids, batch.doc_ends);
  Tensor second = b.model->logits(batch.input_ids.slice(1, 3, 6).contiguous());
  std::vector<float> d = doc.slice(1, 3, 6).contiguous().to_float_vector(), s = second.to_float_vector();
  for (size_t i = 0; i < s.size(); ++i) EXPECT_NEAR(d[i], s[i], 1e-5);
}

TEST(Models, DeepseekV3GradientsMatchFiniteDifferencesOfLossPlusMtp) {
  // float64 end to end: backward(loss) must equal d(loss + mtp_loss)/dθ, the MTP term arriving by
  // injection (docs/models.md "Losses"), through embedding, MLA, MoE, eh_proj and the shared head.
  Json j = tiny_deepseek_v3();
  j["params_dtype"] = "float64";
  j["compute_dtype"] = "float64";
  j["moe_aux_loss_coeff"] = 0.0;
  j["initializer_range"] = 0.3;
  BuiltModel b = build_model(j);
  b.model->materialize(11);
  nn::LMBatch batch = random_batch(24, 1, 5, 12);
  nn::LMOutput out = b.model->forward(batch);
  autograd::backward(out.loss);
  auto objective = [&] {
    autograd::NoGradGuard ng;
    nn::LMOutput o = b.model->forward(batch);
    return o.loss.item() + o.mtp_loss.item();
  };
  for (const char* name : {"embedding.word_embeddings.weight", "mtp.layers.0.eh_proj.weight",
                           "mtp.layers.0.transformer_layer.self_attention.linear_kvb.weight",
                           "decoder.layers.1.mlp.experts.weight2", "output_layer.weight", "decoder.final_layernorm.weight"}) {
    Tensor w = b.model->find_parameter(name)->tensor;
    std::vector<double> analytic = w.grad().to_double_vector();
    double* pw = w.data<double>();
    for (int64_t i = 0; i < w.numel(); i += std::max<int64_t>(1, w.numel() / 23)) {
      const double orig = pw[i];
      pw[i] = orig + 1e-6;
      const double lp = objective();
      pw[i] = orig - 1e-6;
      const double lm = objective();
      pw[i] = orig;
      const double numeric = (lp - lm) / 2e-6;
      EXPECT_NEAR(analytic[i], numeric, 1e-6 + 1e-5 * std::abs(numeric)) << name << "[" << i << "]";
    }
  }
}

TEST(Models, HeadGradsInForwardIsTheCallersChoice) {
  // nn/forward_options.h: the loss and the grads are the same either way; with the option the
  // main and MTP heads form their grads in forward and hold them until backward. Between forward
  // and backward that keeps two [vocab, hidden] fp32 weight grads (and two [tokens, hidden] input
  // grads) live, while the two normed [tokens, hidden] inputs the other way keeps are freed.
  BuiltModel held = build_model(tiny_deepseek_v3()), plain = build_model(tiny_deepseek_v3());
  held.model->materialize(7);
  plain.model->load_state_dict(held.model->state_dict());
  const nn::LMBatch batch = random_batch(24, 2, 6, 8);
  auto forward_backward = [&batch](nn::CausalLM& m, const nn::ForwardOptions& o, int64_t* live) {
    const int64_t before = memory_stats().current_bytes;
    nn::LMOutput out = m.forward(batch, o);
    *live = memory_stats().current_bytes - before;
    autograd::backward(out.loss);
    return out;
  };
  int64_t live_held = 0, live_plain = 0;
  nn::LMOutput a = forward_backward(*held.model, {true}, &live_held);
  nn::LMOutput b = forward_backward(*plain.model, {}, &live_plain);
  EXPECT_EQ(a.loss.item(), b.loss.item());
  EXPECT_EQ(a.mtp_loss.item(), b.mtp_loss.item());
  EXPECT_GE(live_held - live_plain, 2 * (24 * 16 - 12 * 16) * 4);
  for (auto& [name, p] : held.model->named_parameters()) {
    std::vector<double> ga = p->tensor.grad().to_double_vector();
    std::vector<double> gb = plain.model->find_parameter(name)->tensor.grad().to_double_vector();
    ASSERT_EQ(ga.size(), gb.size()) << name;
    for (size_t i = 0; i < ga.size(); ++i) EXPECT_NEAR(ga[i], gb[i], 1e-6 * (1 + std::abs(gb[i]))) << name << " " << i;
  }
}
