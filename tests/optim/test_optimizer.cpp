// The optimizer's non-finite guard (optimizer.h): an update that would store inf or nan in a
// parameter, master or moment writes nothing (bit for bit), names the parameter, still advances
// global_step, and the next update continues exactly like an optimizer that never saw it.
#include <gtest/gtest.h>

#include <bit>
#include <map>
#include <string>
#include <vector>

#include "loom/optim/adamw.h"
#include "loom/optim/muon.h"
#include "optim_test_util.h"

using namespace loom;
using namespace loom::optim;
using namespace loom::optim::testing;

namespace {

// Every bit of the parameters and the optimizer state but global_step (a skipped step counts).
std::map<std::string, std::vector<uint32_t>> snapshot(const Optimizer& opt) {
  std::map<std::string, std::vector<uint32_t>> out;
  auto add = [&out](const std::string& name, const Tensor& t) {
    std::vector<uint32_t> b;
    for (float f : t.to_float_vector()) b.push_back(std::bit_cast<uint32_t>(f));
    out[name] = b;
  };
  for (const auto& p : opt.named_params()) add("param." + p.name, p.param);
  for (const auto& [name, t] : opt.state_dict())
    if (name != "global_step") add(name, t);
  return out;
}

struct AdamPair {
  Tensor w = make_param(random_bf16_values(12, 1), {3, 4}, DType::bf16);
  Tensor b = make_param({0.5f, 0.25f, 0.125f}, {3});
  AdamW opt{{{"layer.weight", w}, {"layer.bias", b}}, AdamWOptions{}};
  void grads(int step, float bias_scale = 1.f) {
    set_grad(w, random_values(12, 10 + step));
    set_grad(b, random_values(3, 20 + step, bias_scale));
  }
};

const char* kProj = "decoder.layers.0.self_attention.linear_proj.weight";

MuonModelInfo mla() {
  MuonModelInfo m;
  m.multi_latent_attention = true;
  m.mla = {2, 2, 1, 2, 0};
  return m;
}

struct MuonPair {
  Tensor w = make_param(random_values(24, 3, 0.1f), {4, 6});
  Tensor norm = make_param({1.f, 1.f, 1.f, 1.f}, {4});
  Muon opt{{{kProj, w}, {"decoder.final_layernorm.weight", norm}}, MuonOptions{}, mla()};
  void grads(int step) {
    set_grad(w, random_values(24, 30 + step));
    set_grad(norm, random_values(4, 40 + step));
  }
};

}  // namespace

// 1e39 is a finite double but not a finite fp32 step: the update would write inf.
TEST(OptimizerGuard, AdamWOverflowingUpdateWritesNothingAndTheRunContinues) {
  AdamPair a, ref;
  for (int s = 0; s < 2; ++s) {
    a.grads(s);
    a.opt.step_with_lr(1e-2);
    ref.grads(s);
    ref.opt.step_with_lr(1e-2);
  }
  const auto before = snapshot(a.opt);
  a.grads(2);
  EXPECT_EQ(a.opt.step_with_lr(1e39), 1e39);
  EXPECT_EQ(a.opt.last_skip(), "'layer.weight'");
  EXPECT_EQ(snapshot(a.opt), before);
  EXPECT_EQ(a.opt.global_step(), 3);  // the step still counts
  // The next update is the one an optimizer that skipped step 3 by hand makes.
  a.grads(3);
  a.opt.step_with_lr(1e-2);
  EXPECT_EQ(a.opt.last_skip(), "");
  ref.opt.set_global_step(3);
  ref.grads(3);
  ref.opt.step_with_lr(1e-2);
  EXPECT_EQ(snapshot(a.opt), snapshot(ref.opt));
}

// Finite grads, finite lr, and still an overflow: a gradient whose square is not an fp32.
TEST(OptimizerGuard, AdamWMomentThatWouldOverflowIsCaughtBeforeTheWrite) {
  AdamPair a;
  a.grads(0);
  a.opt.step_with_lr(1e-3);
  const auto before = snapshot(a.opt);
  a.w.set_grad(Tensor::full({3, 4}, 1e-3));
  set_grad(a.b, {1e-3f, 1e20f, 1e-3f});
  a.opt.step_with_lr(1e-3);
  EXPECT_EQ(a.opt.last_skip(), "'layer.bias'");  // the weight's own update was finite
  EXPECT_EQ(snapshot(a.opt), before);
}

TEST(OptimizerGuard, MuonOverflowingUpdateWritesNothingAndTheRunContinues) {
  MuonPair a, ref;
  a.grads(0);
  a.opt.step_with_lr(2e-2);
  ref.grads(0);
  ref.opt.step_with_lr(2e-2);
  const auto before = snapshot(a.opt);
  a.grads(1);
  a.opt.step_with_lr(1e39);
  EXPECT_EQ(a.opt.last_skip(), "'" + std::string(kProj) + "'");
  EXPECT_EQ(snapshot(a.opt), before);  // momentum, masters and the AdamW fallback's moments
  a.grads(2);
  a.opt.step_with_lr(2e-2);
  EXPECT_EQ(a.opt.last_skip(), "");
  ref.opt.set_global_step(2);
  ref.grads(2);
  ref.opt.step_with_lr(2e-2);
  EXPECT_EQ(snapshot(a.opt), snapshot(ref.opt));
}

// The verdict is the agreed one: another rank's overflow skips this rank's finite update too,
// and the agreement sees this rank's own verdict.
TEST(OptimizerGuard, AnotherRanksOverflowSkipsThisRanksUpdate) {
  AdamPair a;
  std::vector<std::string> asked;
  a.opt.set_finite_agreement([&asked](const std::string& local) {
    asked.push_back(local);
    return std::string("a tensor of rank 1");
  });
  a.grads(0);
  const auto before = snapshot(a.opt);
  a.opt.step_with_lr(1e-3);
  EXPECT_EQ(asked, std::vector<std::string>{""});
  EXPECT_EQ(a.opt.last_skip(), "a tensor of rank 1");
  EXPECT_EQ(snapshot(a.opt), before);
}
