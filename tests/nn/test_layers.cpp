// Finite-difference checks (float64) of every nn layer on tiny shapes, over the input and every
// parameter: norms, MLPs, MHA/GQA attention with qk-norm and biases, MLA (with and without
// q-LoRA, YaRN), the decoder layer.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/nn/attention.h"
#include "loom/nn/mla.h"
#include "loom/nn/mlp.h"
#include "loom/nn/norm.h"
#include "loom/nn/transformer_layer.h"
#include "nn_test_util.h"
#include "testing/gradcheck.h"

using namespace loom;
using namespace loom::nn;
using loom::testing::gradcheck;
using loom::testing::leaf;
using loom::testing::parameters_of;
using loom::testing::tiny_f64_config;

namespace {

// gradcheck over {x, every parameter of m}; f gets x.
double check_module(Module& m, const Tensor& x, const std::function<Tensor(const Tensor&)>& f,
                    const std::string& what, double tol = 1e-6) {
  std::vector<Tensor> inputs{x};
  for (const Tensor& p : parameters_of(m)) inputs.push_back(p);
  return gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; }, inputs, tol,
                   1e-6, what);
}

}  // namespace

TEST(NnLayers, NormsGradcheckAndValues) {
  auto c = tiny_f64_config();
  RMSNorm rms(8, 1e-6, DType::f64);
  rms.materialize(1);
  Tensor x = leaf({3, 8}, 2);
  // weight = ones: y = x / rms(x) (other_training_features.md §3 FusedRMSNorm).
  Tensor y = rms.forward(x);
  std::vector<double> xv = x.to_double_vector(), yv = y.to_double_vector();
  double ms = 0;
  for (int i = 0; i < 8; ++i) ms += xv[i] * xv[i] / 8;
  EXPECT_NEAR(yv[0], xv[0] / std::sqrt(ms + 1e-6), 1e-12);
  rms.find_parameter("weight")->tensor.data<double>()[3] = 1.7;
  EXPECT_LT(check_module(rms, x, [&](const Tensor& in) { return rms.forward(in); }, "rms_norm"), 1e-6);

  c.normalization = NormKind::layer_norm;
  auto ln = make_norm(c, 8);
  EXPECT_EQ(ln->type_name(), "LayerNorm");
  ln->materialize(3);
  ln->find_parameter("bias")->tensor.fill_(0.25);
  EXPECT_LT(check_module(*ln, x, [&](const Tensor& in) { return ln->forward(in); }, "layer_norm"), 1e-6);
}

TEST(NnLayers, SwiGluMlpMatchesFormulaAndGradchecks) {
  auto c = tiny_f64_config();
  MLP mlp(c, 6);
  mlp.materialize(5);
  EXPECT_EQ(mlp.find_parameter("linear_fc1.weight")->global_shape, Shape({12, 8}));
  EXPECT_EQ(mlp.find_parameter("linear_fc2.weight")->global_shape, Shape({8, 6}));
  Tensor x = leaf({2, 3, 8}, 6);
  // y = fc2(silu(gate x) ⊙ up x), gate rows first (docs/models.md).
  std::vector<double> w1 = mlp.find_parameter("linear_fc1.weight")->tensor.to_double_vector();
  std::vector<double> w2 = mlp.find_parameter("linear_fc2.weight")->tensor.to_double_vector();
  std::vector<double> xv = x.to_double_vector();
  std::vector<double> act(6);
  for (int j = 0; j < 6; ++j) {
    double g = 0, u = 0;
    for (int i = 0; i < 8; ++i) {
      g += w1[j * 8 + i] * xv[i];
      u += w1[(6 + j) * 8 + i] * xv[i];
    }
    act[j] = g / (1 + std::exp(-g)) * u;
  }
  double y0 = 0;
  for (int j = 0; j < 6; ++j) y0 += w2[0 * 6 + j] * act[j];
  EXPECT_NEAR(mlp.forward(x).to_double_vector()[0], y0, 1e-12);
  EXPECT_LT(check_module(mlp, x, [&](const Tensor& in) { return mlp.forward(in); }, "swiglu mlp"), 1e-6);
}

TEST(NnLayers, GeluMlpsGradcheck) {
  auto c = tiny_f64_config();
  c.activation = Activation::gelu;
  c.mlp_bias = true;
  MLP geglu(c, 6);
  geglu.materialize(7);
  Tensor x = leaf({2, 2, 8}, 8);
  EXPECT_LT(check_module(geglu, x, [&](const Tensor& in) { return geglu.forward(in); }, "geglu"), 1e-6);
  c.gated_linear_unit = false;
  MLP plain(c, 6);
  EXPECT_EQ(plain.find_parameter("linear_fc1.weight")->global_shape, Shape({6, 8}));
  plain.materialize(9);
  EXPECT_LT(check_module(plain, x, [&](const Tensor& in) { return plain.forward(in); }, "gelu mlp"), 1e-6);
}

TEST(NnLayers, GqaAttentionWithQkNormAndBiasGradchecks) {
  auto c = tiny_f64_config();
  c.qk_layernorm = true;
  c.attention_bias = true;
  auto rotary = std::make_shared<RotaryEmbedding>(c, c.head_dim);
  SelfAttention attn(c, rotary);
  attn.materialize(11);
  for (const char* n : {"linear_q.bias", "linear_k.bias", "linear_v.bias", "linear_proj.bias"})
    attn.find_parameter(n)->tensor.fill_(0.1);
  attn.find_parameter("q_layernorm.weight")->tensor.fill_(1.3);
  EXPECT_EQ(attn.find_parameter("linear_k.weight")->global_shape, Shape({4, 8}));  // 1 kv head
  EXPECT_EQ(attn.find_parameter("q_layernorm.weight")->global_shape, Shape({4}));
  Tensor x = leaf({2, 5, 8}, 12);
  Tensor pos = Tensor::from_vector(std::vector<int64_t>{3, 4, 5, 6, 7, 0, 1, 2, 0, 1}, {2, 5});
  EXPECT_LT(check_module(attn, x, [&](const Tensor& in) { return attn.forward(in, pos, Tensor()); }, "gqa"), 1e-6);
  // Causality: the first position's output does not depend on later tokens.
  Tensor x2 = x.clone();
  x2.data<double>()[4 * 8] += 1.0;
  autograd::NoGradGuard ng;
  Tensor a = attn.forward(x, Tensor(), Tensor()), b = attn.forward(x2, Tensor(), Tensor());
  EXPECT_DOUBLE_EQ(a.to_double_vector()[0], b.to_double_vector()[0]);
  EXPECT_NE(a.to_double_vector()[4 * 8], b.to_double_vector()[4 * 8]);
}

TEST(NnLayers, MlaWithQLoraAndYarnGradchecks) {
  auto c = tiny_f64_config();
  c.multi_latent_attention = true;
  c.rope_interleave = true;
  c.q_lora_rank = 6;
  c.kv_lora_rank = 5;
  c.qk_nope_head_dim = 3;
  c.qk_rope_head_dim = 4;
  c.v_head_dim = 2;
  c.rope_scaling.kind = ops::RopeScaling::Kind::yarn;
  c.rope_scaling.factor = 4;
  c.rope_scaling.original_max_position_embeddings = 4;
  c.rope_scaling.mscale = 1;
  c.rope_scaling.mscale_all_dim = 1;
  auto rotary = std::make_shared<RotaryEmbedding>(c, c.qk_rope_head_dim);
  MLASelfAttention mla(c, rotary);
  // DeepSeek-V3's MLA with YaRN: scale = (dn+dr)^-0.5 · (0.1·ln(factor)+1)².
  const double m = 0.1 * std::log(4.0) + 1;
  EXPECT_NEAR(mla.softmax_scale(), m * m / std::sqrt(7.0), 1e-12);
  EXPECT_EQ(mla.find_parameter("linear_qb.weight")->global_shape, Shape({2 * 7, 6}));
  EXPECT_EQ(mla.find_parameter("linear_kva.weight")->global_shape, Shape({5 + 4, 8}));
  EXPECT_EQ(mla.find_parameter("linear_kvb.weight")->global_shape, Shape({2 * (3 + 2), 5}));
  EXPECT_EQ(mla.find_parameter("linear_proj.weight")->global_shape, Shape({8, 2 * 2}));
  mla.materialize(13);
  Tensor x = leaf({2, 4, 8}, 14);
  EXPECT_LT(check_module(mla, x, [&](const Tensor& in) { return mla.forward(in, Tensor(), Tensor()); }, "mla"), 1e-6);
  // QK-clip bookkeeping: a running fp32 [heads] maximum.
  mla.core_attention().set_track_max_logits(true);
  autograd::NoGradGuard ng;
  mla.forward(x, Tensor(), Tensor());
  ASSERT_TRUE(mla.core_attention().max_logits().defined());
  EXPECT_EQ(mla.core_attention().max_logits().shape(), Shape({2}));
}

TEST(NnLayers, MlaWithoutQLoraGradchecks) {
  auto c = tiny_f64_config();
  c.multi_latent_attention = true;
  c.q_lora_rank = 0;
  c.kv_lora_rank = 4;
  c.qk_nope_head_dim = 2;
  c.qk_rope_head_dim = 2;
  c.v_head_dim = 3;
  auto rotary = std::make_shared<RotaryEmbedding>(c, c.qk_rope_head_dim);
  MLASelfAttention mla(c, rotary);
  EXPECT_NE(mla.find_parameter("linear_q.weight"), nullptr);
  EXPECT_EQ(mla.find_parameter("linear_qa.weight"), nullptr);
  mla.materialize(15);
  Tensor x = leaf({1, 5, 8}, 16);
  Tensor doc_ends = Tensor::from_vector(std::vector<int64_t>{2, 5}, {1, 2});
  EXPECT_LT(check_module(mla, x, [&](const Tensor& in) { return mla.forward(in, Tensor(), doc_ends); }, "mla no lora"),
            1e-6);
}

TEST(NnLayers, DecoderLayerGradchecks) {
  auto c = tiny_f64_config();
  auto rotary = std::make_shared<RotaryEmbedding>(c, c.head_dim);
  TransformerLayer layer(c, 0, rotary);
  std::vector<std::string> names;
  for (auto& [n, p] : layer.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"input_layernorm.weight", "self_attention.linear_q.weight",
                                             "self_attention.linear_k.weight", "self_attention.linear_v.weight",
                                             "self_attention.linear_proj.weight", "pre_mlp_layernorm.weight",
                                             "mlp.linear_fc1.weight", "mlp.linear_fc2.weight"}));
  layer.materialize(17);
  Tensor x = leaf({2, 3, 8}, 18);
  EXPECT_LT(check_module(layer, x, [&](const Tensor& in) { return layer.forward(in, Tensor(), Tensor()); }, "layer"),
            1e-6);
}
