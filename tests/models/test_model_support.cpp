// Model facts other layers use: parameter counts and training FLOPs per token for MFU
// (models/accounting.h formula), Muon's per-piece split and QK-clip names (MindFormers' Muon),
// checked against the optimizer's own split schema.
#include <gtest/gtest.h>

#include "loom/autograd/grad_mode.h"
#include "loom/models/accounting.h"
#include "loom/models/muon_info.h"
#include "loom/models/registry.h"
#include "loom/optim/muon_split.h"
#include "model_test_util.h"

using namespace loom;
using namespace loom::models;
using loom::testing::Json;

TEST(ModelSupport, ParameterCountsMatchTheBuiltModels) {
  for (const Json& j : {loom::testing::tiny_llama(), loom::testing::tiny_qwen3(), loom::testing::tiny_qwen3_moe(),
                        loom::testing::tiny_deepseek_v3()}) {
    BuiltModel b = build_model(j);
    ParameterCounts p = count_parameters(b.args);
    EXPECT_EQ(p.total, b.model->num_parameters()) << b.args.model_type;
    EXPECT_EQ(p.embedding, 24 * 16);
  }
  // Qwen3-MoE: 1 MoE layer of 4 experts (3·16·8 each), top-2 active ⇒ 2 experts inactive.
  ModelArgs q = ModelArgs::from_json(loom::testing::tiny_qwen3_moe());
  ParameterCounts pq = count_parameters(q);
  EXPECT_EQ(pq.total - pq.active_per_token, 2 * 3 * 16 * 8);
  // DeepSeek-V3 tiny: MoE in decoder layer 1 and the MTP layer, 2 of 4 experts inactive each.
  ModelArgs d = ModelArgs::from_json(loom::testing::tiny_deepseek_v3());
  ParameterCounts pd = count_parameters(d);
  EXPECT_EQ(pd.total - pd.active_per_token, 2 * 2 * 3 * 16 * 6);
  EXPECT_GT(pd.mtp, 0);
}

TEST(ModelSupport, FlopsPerTokenFollowTheBenchFormula) {
  // Size A (configs/bench/size_a.yaml): d 256, 4 layers, 4/2 heads, seq 256, vocab 8192, ffn 768.
  Json a{{"model_type", "llama"}, {"vocab_size", 8192}, {"hidden_size", 256}, {"num_hidden_layers", 4},
         {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", 768}};
  ModelArgs args = ModelArgs::from_json(a);
  const double d = 256, L = 4, T = 256;
  const double n_mm = L * (d * d + 2 * 128 * d + d * d + 3 * 768 * d) + 8192 * d;
  EXPECT_EQ(count_parameters(args).matmul_per_token, static_cast<int64_t>(n_mm));
  EXPECT_DOUBLE_EQ(training_flops_per_token(args, 256), 6 * n_mm + 12 * L * d * T);
  // Size B parameter total (bench table: 124.7 M, untied).
  Json bsize{{"model_type", "llama"}, {"vocab_size", 32000}, {"hidden_size", 768}, {"num_hidden_layers", 12},
             {"num_attention_heads", 12}, {"num_key_value_heads", 4}, {"intermediate_size", 2048}};
  EXPECT_NEAR(count_parameters(ModelArgs::from_json(bsize)).total / 1e6, 124.7, 0.05);
  // MLA: attention term 6·S·H·(d_qk + d_v) per layer; MoE counts the k active experts only.
  ModelArgs ds = ModelArgs::from_json(loom::testing::tiny_deepseek_v3());
  ParameterCounts p = count_parameters(ds);
  const double attn = 6.0 * 10 * 2 * ((4 + 2) + 4);
  EXPECT_DOUBLE_EQ(training_flops_per_token(ds, 10, false), 6.0 * p.matmul_per_token + 2 * attn);
  EXPECT_GT(training_flops_per_token(ds, 10, true), training_flops_per_token(ds, 10, false));
}

TEST(ModelSupport, MuonPiecesAgreeWithTheOptimizerSchema) {
  BuiltModel b = build_model(loom::testing::tiny_deepseek_v3());
  const ModelArgs& a = b.args;
  MuonModelFacts facts = muon_model_facts(a);
  ASSERT_TRUE(facts.multi_latent_attention);
  optim::MlaDims dims{facts.num_heads, facts.qk_nope_head_dim, facts.qk_rope_head_dim, facts.v_head_dim,
                      facts.q_lora_rank};
  optim::MuonSplitSchema schema = optim::MuonSplitSchema::standard(dims);
  int fused = 0;
  for (auto& [name, p] : b.model->named_parameters()) {
    if (p->global_shape.ndim() < 2) continue;
    std::vector<MuonPiece> mine = muon_pieces(a, name, p->global_shape);
    std::vector<optim::MuonBlock> theirs = schema.blocks(name, p->global_shape);
    ASSERT_EQ(mine.size(), theirs.size()) << name;
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_EQ(mine[i].row0, theirs[i].row0) << name;
      EXPECT_EQ(mine[i].rows, theirs[i].rows) << name;
      EXPECT_EQ(mine[i].col0, theirs[i].col0) << name;
      EXPECT_EQ(mine[i].cols, theirs[i].cols) << name;
    }
    if (mine.size() > 1) ++fused;
  }
  // fc1 ×2 (dense layer 0, shared experts ×2), weight1 ×2, linear_qb ×3, linear_kvb ×3.
  EXPECT_EQ(fused, 1 + 2 + 2 + 3 + 3);
  auto qb = muon_pieces(a, "decoder.layers.0.self_attention.linear_qb.weight", {12, 8});
  ASSERT_EQ(qb.size(), 4u);  // per head: q_nope rows (4), q_pe rows (2)
  EXPECT_EQ(qb[1], (MuonPiece{4, 2, 0, 8}));
}

TEST(ModelSupport, QkClipNamesAndObservations) {
  BuiltModel b = build_model(loom::testing::tiny_deepseek_v3());
  MuonModelFacts facts = muon_model_facts(b.args);
  ASSERT_EQ(facts.qk_clip_layers.size(), 3u);  // 2 decoder layers + 1 MTP layer
  EXPECT_EQ(facts.qk_clip_layers[0].q_up_name, "decoder.layers.0.self_attention.linear_qb.weight");
  EXPECT_EQ(facts.qk_clip_layers[2].kv_up_name, "mtp.layers.0.transformer_layer.self_attention.linear_kvb.weight");
  for (const auto& l : facts.qk_clip_layers) {
    EXPECT_NE(b.model->find_parameter(l.q_up_name), nullptr) << l.q_up_name;
    EXPECT_NE(b.model->find_parameter(l.kv_up_name), nullptr) << l.kv_up_name;
  }
  b.model->materialize(1);
  b.model->set_track_max_logits(true);
  {
    autograd::NoGradGuard ng;
    b.model->forward(loom::testing::random_batch(24, 2, 5, 2));
  }
  auto obs = take_qk_clip_observations(*b.model, b.args);
  ASSERT_EQ(obs.size(), 3u);
  EXPECT_EQ(obs[0].max_logits.size(), 2u);  // per head
  EXPECT_TRUE(take_qk_clip_observations(*b.model, b.args)[0].max_logits.empty());  // reset by the take
  EXPECT_TRUE(muon_model_facts(ModelArgs::from_json(loom::testing::tiny_llama())).qk_clip_layers.empty());
}
