// QK-clip (MuonClip, as MindFormers' Muon applies it): which rows get sqrt(γ), γ or nothing, when
// it fires, and the copy back to bf16 model parameters through Muon.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/core/error.h"
#include "loom/optim/muon.h"
#include "loom/optim/qk_clip.h"
#include "optim_test_util.h"

using namespace loom;
using namespace loom::optim;
using namespace loom::optim::testing;

namespace {

// H=2 heads, q_nope 2 + q_pe 1 rows per head in linear_qb, k_nope 2 + v 3 rows in linear_kvb.
const MlaDims kDims{2, 2, 1, 3, 4};
const char* kQ = "decoder.layers.0.self_attention.linear_qb.weight";
const char* kKV = "decoder.layers.0.self_attention.linear_kvb.weight";

Tensor ones(int64_t rows, int64_t cols) { return Tensor::full({rows, cols}, 1.0); }

std::vector<float> row_values(const Tensor& t) {  // first column of each row
  std::vector<float> out;
  for (int64_t r = 0; r < t.size(0); ++r) out.push_back(static_cast<float>(t.at({r, 0})));
  return out;
}

}  // namespace

TEST(QkClip, ScalesExactlyTheOffendingHeadsRows) {
  Tensor q = ones(6, 4), kv = ones(10, 4);
  auto master_of = [&](const std::string& n) { return n == kQ ? q : n == kKV ? kv : Tensor(); };
  QkClipResult r = apply_qk_clip({{kQ, kKV, {50.f, 400.f}}}, 100.f, kDims, master_of);
  EXPECT_TRUE(r.fired);
  EXPECT_EQ(r.heads_clipped, 1);
  EXPECT_FLOAT_EQ(r.max_logit, 400.f);
  EXPECT_EQ(r.scaled, (std::vector<std::string>{kQ, kKV}));
  // head 1: γ = 100/400 = 0.25, sqrt(γ) = 0.5. q rows: [nope nope pe] per head.
  EXPECT_EQ(row_values(q), (std::vector<float>{1, 1, 1, 0.5f, 0.5f, 0.25f}));
  // kv rows: [k_nope k_nope v v v] per head; v untouched.
  EXPECT_EQ(row_values(kv), (std::vector<float>{1, 1, 1, 1, 1, 0.5f, 0.5f, 1, 1, 1}));
  // Every column of a scaled row is scaled.
  EXPECT_FLOAT_EQ(static_cast<float>(q.at({5, 3})), 0.25f);
}

// Fires iff max S >= τ; each head gets its own γ.
TEST(QkClip, ThresholdAndPerHeadGamma) {
  Tensor q = ones(6, 2), kv = ones(10, 2);
  auto master_of = [&](const std::string& n) { return n == kQ ? q : n == kKV ? kv : Tensor(); };
  QkClipResult below = apply_qk_clip({{kQ, kKV, {99.f, 20.f}}}, 100.f, kDims, master_of);
  EXPECT_FALSE(below.fired);
  EXPECT_EQ(row_values(q), std::vector<float>(6, 1.f));
  QkClipResult both = apply_qk_clip({{kQ, kKV, {200.f, 100.f}}}, 100.f, kDims, master_of);
  EXPECT_TRUE(both.fired);
  EXPECT_EQ(both.heads_clipped, 2);  // S = τ counts (γ = 1)
  const float g0 = 0.5f;
  EXPECT_EQ(row_values(q), (std::vector<float>{std::sqrt(g0), std::sqrt(g0), g0, 1, 1, 1}));
}

// Layers are independent; a layer below τ is untouched even when another fires.
TEST(QkClip, OnlyLayersWithHotHeadsChange) {
  Tensor q0 = ones(6, 2), kv0 = ones(10, 2), q1 = ones(6, 2), kv1 = ones(10, 2);
  auto master_of = [&](const std::string& n) {
    if (n == "l0.linear_qb") return q0;
    if (n == "l0.linear_kvb") return kv0;
    if (n == "l1.linear_qb") return q1;
    if (n == "l1.linear_kvb") return kv1;
    return Tensor();
  };
  QkClipResult r = apply_qk_clip({{"l0.linear_qb", "l0.linear_kvb", {10.f, 20.f}},
                                  {"l1.linear_qb", "l1.linear_kvb", {150.f, 10.f}}},
                                 100.f, kDims, master_of);
  EXPECT_EQ(r.scaled, (std::vector<std::string>{"l1.linear_qb", "l1.linear_kvb"}));
  EXPECT_EQ(row_values(q0), std::vector<float>(6, 1.f));
  EXPECT_FLOAT_EQ(row_values(q1)[2], 100.f / 150.f);
}

TEST(QkClip, ShapeMismatchNamesTheWeight) {
  Tensor q = ones(7, 2), kv = ones(10, 2);
  auto master_of = [&](const std::string& n) { return n == kQ ? q : kv; };
  try {
    apply_qk_clip({{kQ, kKV, {500.f, 1.f}}}, 100.f, kDims, master_of);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find(kQ), std::string::npos);
  }
  EXPECT_THROW(apply_qk_clip({{kQ, kKV, {500.f}}}, 100.f, kDims, master_of), ShapeError);
}

// Through Muon: applied to the fp32 masters after the update, then copied to the bf16 params.
TEST(QkClip, MuonAppliesToMastersAndCopiesBack) {
  Tensor q = make_param(std::vector<float>(6 * 4, 1.f), {6, 4}, DType::bf16);
  Tensor kv = make_param(std::vector<float>(10 * 4, 1.f), {10, 4}, DType::bf16);
  MuonModelInfo model;
  model.multi_latent_attention = true;
  model.mla = kDims;
  MuonOptions o;
  o.weight_decay = 0.0;
  o.qk_clip_threshold = 100.0;
  Muon opt({{kQ, q}, {kKV, kv}}, o, model);
  set_grad(q, std::vector<float>(24, 0.f));  // zero grads: Newton–Schulz of 0 is 0
  set_grad(kv, std::vector<float>(40, 0.f));
  opt.set_qk_clip_inputs({{kQ, kKV, {400.f, 100.f / 3.f}}});
  opt.step_with_lr(0.01);
  EXPECT_TRUE(opt.last_qk_clip().fired);
  EXPECT_EQ(row_values(q), (std::vector<float>{0.5f, 0.5f, 0.25f, 1, 1, 1}));
  EXPECT_EQ(row_values(kv), (std::vector<float>{0.5f, 0.5f, 1, 1, 1, 1, 1, 1, 1, 1}));
  auto st = opt.state_dict();
  EXPECT_FLOAT_EQ(static_cast<float>(st.at(std::string("main_param.") + kQ).at({2, 1})), 0.25f);
  // Inputs are consumed: the next step does not clip again.
  opt.step_with_lr(0.01);
  EXPECT_FALSE(opt.last_qk_clip().fired);
  EXPECT_EQ(row_values(q)[2], 0.25f);
  // Disabled: inputs are ignored.
  MuonOptions off = o;
  off.qk_clip_enabled = false;
  Tensor q2 = make_param(std::vector<float>(24, 1.f), {6, 4}, DType::bf16);
  Muon opt_off({{kQ, q2}}, off, model);
  set_grad(q2, std::vector<float>(24, 0.f));
  opt_off.set_qk_clip_inputs({{kQ, "", {400.f, 1.f}}});
  opt_off.step_with_lr(0.01);
  EXPECT_EQ(row_values(q2), std::vector<float>(6, 1.f));
}

// Under sharding each rank holds some rows (placement row runs) and the maxima come per global
// head: the rows of a shard end up as the same rows of the whole weight clipped on one process,
// including a head whose rows straddle two shards and a shard made of two runs.
TEST(QkClip, ShardedRowsAreScaledLikeTheWholeWeight) {
  const std::vector<float> logits{400.f, 50.f};
  Tensor whole_q = Tensor::from_vector(random_values(6 * 3, 71), {6, 3});
  Tensor whole_kv = Tensor::from_vector(random_values(10 * 3, 72), {10, 3});
  const Tensor q_before = whole_q.clone(), kv_before = whole_kv.clone();
  apply_qk_clip({{kQ, kKV, logits}}, 100.f, kDims,
                [&](const std::string& n) { return n == kQ ? whole_q : whole_kv; });
  // Shard A: q rows 2..4 (head 0's q_pe and head 1's q_nope); kv rows 0..2 and 7..9 (two runs).
  QkClipTarget q;
  q.master = q_before.narrow(0, 2, 3).clone();
  q.global_rows = 6;
  q.rows = {{0, 2, 3}};
  QkClipTarget kv;
  kv.master = Tensor::empty({6, 3});
  kv.master.narrow(0, 0, 3).copy_(kv_before.narrow(0, 0, 3));
  kv.master.narrow(0, 3, 3).copy_(kv_before.narrow(0, 7, 3));
  kv.global_rows = 10;
  kv.rows = {{0, 0, 3}, {3, 7, 3}};
  QkClipResult r = apply_qk_clip({{kQ, kKV, logits}}, 100.f, kDims,
                                 [&](const std::string& n) { return n == kQ ? q : kv; });
  EXPECT_EQ(r.heads_clipped, 1);
  EXPECT_EQ(q.master.to_float_vector(), whole_q.narrow(0, 2, 3).contiguous().to_float_vector());
  EXPECT_EQ(kv.master.narrow(0, 0, 3).contiguous().to_float_vector(),
            whole_kv.narrow(0, 0, 3).contiguous().to_float_vector());
  EXPECT_EQ(kv.master.narrow(0, 3, 3).contiguous().to_float_vector(),
            whole_kv.narrow(0, 7, 3).contiguous().to_float_vector());
  // Head 0 was clipped (γ = 0.25): its q_pe row (global 2) took γ, head 1's rows kept theirs.
  EXPECT_FLOAT_EQ(static_cast<float>(q.master.at({0, 1})), static_cast<float>(q_before.at({2, 1})) * 0.25f);
  EXPECT_EQ(static_cast<float>(q.master.at({1, 1})), static_cast<float>(q_before.at({3, 1})));
  // A run that does not fit the shard is an error naming the weight.
  q.rows = {{1, 2, 3}};
  EXPECT_THROW(apply_qk_clip({{kQ, "", logits}}, 100.f, kDims, [&](const std::string&) { return q; }), ShapeError);
}
