// Checkpoint state (MindFormers' optimizer state names): main_param./adam_m./adam_v./muon_m.
// entries and global_step round-trip exactly; missing or mis-shaped entries are clear errors.
#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/optim/adamw.h"
#include "loom/optim/muon.h"
#include "optim_test_util.h"

using namespace loom;
using namespace loom::optim;
using namespace loom::optim::testing;

namespace {

std::map<std::string, Tensor> deep_copy(const std::map<std::string, Tensor>& s) {
  std::map<std::string, Tensor> out;
  for (const auto& [k, v] : s) out[k] = v.clone();
  return out;
}

MuonModelInfo mla() {
  MuonModelInfo m;
  m.multi_latent_attention = true;
  m.mla = {2, 2, 1, 2, 0};
  return m;
}

}  // namespace

TEST(OptimizerState, AdamWNamesAndExactRoundTrip) {
  std::vector<float> w0 = random_bf16_values(12, 1);
  Tensor w = make_param(w0, {3, 4}, DType::bf16);
  Tensor b = make_param({0.5f, 0.25f, 0.125f}, {3});
  AdamW opt({{"layer.weight", w}, {"layer.bias", b}}, AdamWOptions{});
  for (int s = 0; s < 3; ++s) {
    set_grad(w, random_values(12, 10 + s));
    set_grad(b, random_values(3, 20 + s));
    opt.step_with_lr(1e-2);
  }
  const auto saved = deep_copy(opt.state_dict());
  std::vector<std::string> keys;
  for (const auto& [k, v] : saved) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"adam_m.layer.bias", "adam_m.layer.weight",
                                            "adam_v.layer.bias", "adam_v.layer.weight",
                                            "global_step", "main_param.layer.weight"}));
  EXPECT_EQ(saved.at("global_step").dtype(), DType::i64);
  EXPECT_EQ(saved.at("global_step").dim(), 0);
  EXPECT_EQ(saved.at("global_step").item(), 3.0);

  // A fresh optimizer over fresh params loads the state and continues identically.
  Tensor w2 = make_param(w0, {3, 4}, DType::bf16);
  Tensor b2 = make_param({0.f, 0.f, 0.f}, {3});
  b2.copy_(b);
  AdamW opt2({{"layer.weight", w2}, {"layer.bias", b2}}, AdamWOptions{});
  opt2.load_state_dict(saved);
  EXPECT_EQ(opt2.global_step(), 3);
  for (const auto& [k, v] : opt2.state_dict())
    EXPECT_EQ(v.to_double_vector(), saved.at(k).to_double_vector()) << k;
  EXPECT_EQ(w2.to_float_vector(), w.to_float_vector());  // params refreshed from the masters
  for (auto* o : {static_cast<Optimizer*>(&opt), static_cast<Optimizer*>(&opt2)}) {
    (void)o;
  }
  set_grad(w, random_values(12, 99));
  set_grad(b, random_values(3, 98));
  w2.set_grad(w.grad().clone());
  b2.set_grad(b.grad().clone());
  opt.step_with_lr(1e-2);
  opt2.step_with_lr(1e-2);
  EXPECT_EQ(w2.to_float_vector(), w.to_float_vector());
  EXPECT_EQ(b2.to_float_vector(), b.to_float_vector());
}

TEST(OptimizerState, MuonMomentumRoundTrip) {
  Tensor w = make_param(random_values(8, 2), {2, 4});
  Tensor n = make_param({1.f, 1.f}, {2});
  Muon opt({{"decoder.layers.0.mlp.linear_fc2.weight", w}, {"decoder.final_layernorm.weight", n}},
           MuonOptions{}, mla());
  set_grad(w, random_values(8, 3));
  set_grad(n, {0.1f, -0.1f});
  opt.step_with_lr(0.02);
  const auto saved = deep_copy(opt.state_dict());
  EXPECT_EQ(saved.count("muon_m.decoder.layers.0.mlp.linear_fc2.weight"), 1u);
  EXPECT_EQ(saved.count("adam_m.decoder.final_layernorm.weight"), 1u);
  EXPECT_EQ(saved.count("main_param.decoder.layers.0.mlp.linear_fc2.weight"), 0u);  // fp32 param
  Tensor w2 = w.clone();
  w2.set_requires_grad(true);
  Tensor n2 = n.clone();
  n2.set_requires_grad(true);
  Muon opt2({{"decoder.layers.0.mlp.linear_fc2.weight", w2}, {"decoder.final_layernorm.weight", n2}},
            MuonOptions{}, mla());
  opt2.load_state_dict(saved);
  for (const auto& [k, v] : opt2.state_dict())
    EXPECT_EQ(v.to_double_vector(), saved.at(k).to_double_vector()) << k;
}

TEST(OptimizerState, MissingAndMisShapedEntriesAreCheckpointErrors) {
  Tensor w = make_param(std::vector<float>(6, 0.f), {2, 3});
  AdamW opt({{"w", w}}, AdamWOptions{});
  auto state = deep_copy(opt.state_dict());
  auto missing = state;
  missing.erase("adam_v.w");
  try {
    opt.load_state_dict(missing);
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("entry 'adam_v.w' is missing"), std::string::npos);
  }
  auto shaped = state;
  shaped["adam_m.w"] = Tensor::zeros({3, 2});
  try {
    opt.load_state_dict(shaped);
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("entry 'adam_m.w' has shape [3, 2] but this model needs [2, 3]"),
              std::string::npos);
  }
  auto no_step = state;
  no_step.erase("global_step");
  EXPECT_THROW(opt.load_state_dict(no_step), CheckpointError);
  // An AdamW checkpoint does not load into Muon (muon_m.* missing).
  Muon muon({{"w", w}}, MuonOptions{}, mla());
  EXPECT_THROW(muon.load_state_dict(state), CheckpointError);
  // Extra entries are warned about and ignored.
  auto extra = state;
  extra["muon_m.other"] = Tensor::zeros({1});
  ::testing::internal::CaptureStderr();
  opt.load_state_dict(extra);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("ignoring 1 entry this AdamW optimizer does not use: muon_m.other"),
            std::string::npos);
}

// no_load_optim: masters are refreshed from the (loaded) model params.
TEST(OptimizerState, RefreshMastersFromParams) {
  Tensor w = make_param({1.f, 2.f}, {2}, DType::bf16);
  AdamW opt({{"w", w}}, AdamWOptions{});
  w.copy_(Tensor::from_vector(std::vector<float>{3.f, 4.f}, {2}));
  opt.refresh_masters_from_params();
  EXPECT_EQ(opt.state_dict().at("main_param.w").to_float_vector(), (std::vector<float>{3.f, 4.f}));
}
