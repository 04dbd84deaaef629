// Muon (MindFormers' muon.py; spec training_hyperparameters.md §1.2): Newton–Schulz, the update
// rule, the split schema, routing to the AdamW fallback, construction errors and option parsing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"
#include "loom/kernels/cpu/newton_schulz.h"
#include "loom/optim/muon.h"
#include "loom/optim/optimizer_factory.h"
#include "optim_test_util.h"

using namespace loom;
using namespace loom::optim;
using namespace loom::optim::testing;
using loom::kernels::cpu::newton_schulz_bf16;
using loom::kernels::cpu::NsWorkspace;

namespace {

using Mat = std::vector<double>;  // row-major

// Eigenvalues of a symmetric n×n matrix (cyclic Jacobi), for singular values via X·Xᵀ.
std::vector<double> symmetric_eigenvalues(Mat a, int n) {
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) off += a[i * n + j] * a[i * n + j];
    if (off < 1e-22) break;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) {
        if (std::abs(a[p * n + q]) < 1e-300) continue;
        const double theta = (a[q * n + q] - a[p * n + p]) / (2 * a[p * n + q]);
        const double t = (theta >= 0 ? 1 : -1) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int k = 0; k < n; ++k) {  // rotate columns p, q
          const double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (int k = 0; k < n; ++k) {  // rotate rows p, q
          const double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
      }
  }
  std::vector<double> ev(n);
  for (int i = 0; i < n; ++i) ev[i] = a[i * n + i];
  std::sort(ev.begin(), ev.end());
  return ev;
}

std::vector<double> singular_values(const std::vector<float>& x, int rows, int cols) {
  const int n = std::min(rows, cols);
  Mat g(n * n, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < std::max(rows, cols); ++k)
        g[i * n + j] += rows <= cols ? double(x[i * cols + k]) * x[j * cols + k]
                                     : double(x[k * cols + i]) * x[k * cols + j];
  std::vector<double> ev = symmetric_eigenvalues(g, n);
  for (auto& e : ev) e = std::sqrt(std::max(0.0, e));
  return ev;
}

// Newton–Schulz in double: exact (bf16 = false), or rounding to bf16 at the points the
// reference produces bf16 tensors (bf16 = true; double accumulation instead of fp32).
std::vector<double> newton_schulz_double(const std::vector<double>& in, int rows, int cols,
                                         int steps, bool bf16 = false, double eps = 1e-7) {
  auto rd = [bf16](double v) { return bf16 ? double(round_to_bf16(static_cast<float>(v))) : v; };
  const bool tall = rows > cols;
  const int n = tall ? cols : rows, m = tall ? rows : cols;
  Mat x(n * m);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) (tall ? x[j * m + i] : x[i * m + j]) = in[i * cols + j];
  for (double& v : x) v = rd(v);
  double norm = 0;
  for (double v : x) norm += v * v;
  norm = rd(std::sqrt(norm));
  const double denom = rd(norm + eps);
  for (double& v : x) v = rd(v / denom);
  for (int s = 0; s < steps; ++s) {
    Mat a(n * n, 0), b(n * n, 0), y(n * m, 0);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        for (int k = 0; k < m; ++k) a[i * n + j] += x[i * m + k] * x[j * m + k];
    for (double& v : a) v = rd(v);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        double aa = 0;
        for (int k = 0; k < n; ++k) aa += a[i * n + k] * a[k * n + j];
        b[i * n + j] = rd(double(-4.7750f) * a[i * n + j] + double(2.0315f) * aa);
      }
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < m; ++j) {
        double bx = 0;
        for (int k = 0; k < n; ++k) bx += b[i * n + k] * x[k * m + j];
        y[i * m + j] = rd(double(3.4445f) * x[i * m + j] + bx);
      }
    x = y;
  }
  std::vector<double> out(rows * cols);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) out[i * cols + j] = tall ? x[j * m + i] : x[i * m + j];
  return out;
}

MuonModelInfo mla_model(MlaDims dims = {2, 3, 2, 4, 8}) {
  MuonModelInfo info;
  info.multi_latent_attention = true;
  info.mla = dims;
  return info;
}

std::string muon_error(const MuonOptions& o, const std::optional<MuonModelInfo>& model, bool swap = false) {
  Tensor w = make_param(std::vector<float>(4, 0.f), {2, 2});
  try {
    Muon m({{"w", w}}, o, model, swap);
  } catch (const ValueError& e) {
    return e.what();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

// spec §1.2 "Two Formats of ns_coefficients".
TEST(NewtonSchulz, FlatAndSegmentedSchedules) {
  NsSchedule flat = make_ns_schedule(yaml_like("[3.4445, -4.7750, 2.0315]"), 3, "p");
  ASSERT_EQ(flat.size(), 3u);
  EXPECT_FLOAT_EQ(flat[2].b, -4.775f);
  NsSchedule seg = make_ns_schedule(
      yaml_like("[[[3.4445, -4.7750, 2.0315], 8], [[2.0, -1.5, 0.5], 2]]"), 5, "p");
  ASSERT_EQ(seg.size(), 10u);  // ns_steps (5) is ignored
  EXPECT_FLOAT_EQ(seg[7].a, 3.4445f);
  EXPECT_FLOAT_EQ(seg[8].a, 2.0f);
  EXPECT_FLOAT_EQ(seg[9].c, 0.5f);
  EXPECT_EQ(make_ns_schedule(nlohmann::ordered_json(), 4, "p").size(), 4u);
  EXPECT_THROW(make_ns_schedule(yaml_like("[1, 2]"), 5, "optimizer.ns_coefficients"), ConfigError);
  EXPECT_THROW(make_ns_schedule(yaml_like("[[[1, 2, 3], 0]]"), 5, "optimizer.ns_coefficients"), ConfigError);
  EXPECT_THROW(make_ns_schedule(yaml_like("[[[1, 2, 3], 2.5]]"), 5, "optimizer.ns_coefficients"), ConfigError);
}

// The quintic coefficients push every singular value into a band around 1 (they trade exact
// convergence for speed); the DeepSeek-V4 style tail [2, -1.5, 0.5] pulls them onto 1.
TEST(NewtonSchulz, SingularValuesNearOne) {
  const int rows = 12, cols = 40;
  std::vector<float> x = random_bf16_values(rows * cols, 5);
  x[0] = 40.f;  // a spread spectrum
  NsWorkspace ws;
  std::vector<float> quintic = x;
  newton_schulz_bf16(quintic.data(), rows, cols, NsSchedule(5, {3.4445f, -4.7750f, 2.0315f}), 1e-7f, ws);
  for (double s : singular_values(quintic, rows, cols)) {
    EXPECT_GT(s, 0.55) << s;
    EXPECT_LT(s, 1.25) << s;
  }
  std::vector<float> tail = x;
  NsSchedule dsv4(8, {3.4445f, -4.7750f, 2.0315f});
  dsv4.insert(dsv4.end(), 2, {2.0f, -1.5f, 0.5f});
  newton_schulz_bf16(tail.data(), rows, cols, dsv4, 1e-7f, ws);
  for (double s : singular_values(tail, rows, cols)) EXPECT_NEAR(s, 1.0, 0.05);
  // Every output value is bf16-representable (the emulation rounds where the reference does).
  for (float v : tail) EXPECT_EQ(v, round_to_bf16(v));
}

// A tall matrix is orthogonalised through its transpose: same numbers, transposed.
TEST(NewtonSchulz, TallMatrixUsesTranspose) {
  const int rows = 30, cols = 7;
  std::vector<float> x = random_bf16_values(rows * cols, 9);
  std::vector<float> xt(rows * cols);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) xt[j * rows + i] = x[i * cols + j];
  NsWorkspace ws;
  const NsSchedule sched(5, {3.4445f, -4.7750f, 2.0315f});
  newton_schulz_bf16(x.data(), rows, cols, sched, 1e-7f, ws);
  newton_schulz_bf16(xt.data(), cols, rows, sched, 1e-7f, ws);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) EXPECT_EQ(x[i * cols + j], xt[j * rows + i]);
  for (double s : singular_values(x, rows, cols)) EXPECT_NEAR(s, 0.9, 0.35);
}

// muon.py's update: M = μM + G; U = G + μM; W = W(1 − lr·wd) − lr·sqrt(max(a,b))·rms·NS(U).
TEST(Muon, StepMatchesHandComputedUpdate) {
  const int rows = 4, cols = 6;
  std::vector<float> w0 = random_values(rows * cols, 21);
  Tensor w = make_param(w0, {rows, cols});
  MuonOptions o;
  o.weight_decay = 0.1;
  Muon opt({{"decoder.layers.0.self_attention.linear_proj.weight", w}}, o, mla_model());
  EXPECT_EQ(opt.rule_of("decoder.layers.0.self_attention.linear_proj.weight"), UpdateRule::muon);
  std::vector<float> g1 = random_values(rows * cols, 22), g2 = random_values(rows * cols, 23);
  std::vector<double> w_ref(w0.begin(), w0.end()), w_emul = w_ref, m_ref(rows * cols, 0.0);
  const double lr = 0.02;
  for (const auto& g : {g1, g2}) {
    set_grad(w, g);
    opt.step_with_lr(lr);
    std::vector<double> u(rows * cols);
    for (int i = 0; i < rows * cols; ++i) {
      m_ref[i] = 0.95 * m_ref[i] + g[i];
      u[i] = g[i] + 0.95 * m_ref[i];
    }
    std::vector<double> x = newton_schulz_double(u, rows, cols, 5);
    std::vector<double> xb = newton_schulz_double(u, rows, cols, 5, true);
    for (int i = 0; i < rows * cols; ++i) {
      w_ref[i] = w_ref[i] * (1 - lr * 0.1) - lr * std::sqrt(6.0) * 0.2 * x[i];
      w_emul[i] = w_emul[i] * (1 - lr * 0.1) - lr * std::sqrt(6.0) * 0.2 * xb[i];
    }
  }
  // The update is ~1e-2 per element. Against the same rounding points in double the emulation
  // agrees to fp32 noise; against exact arithmetic bf16 Newton–Schulz is good to a few percent.
  std::vector<float> got = w.to_float_vector();
  for (int i = 0; i < rows * cols; ++i) {
    EXPECT_NEAR(got[i], w_emul[i], 2e-6) << i;
    EXPECT_NEAR(got[i], w_ref[i], 6e-4) << i;
  }
  std::vector<float> m = opt.state_dict().at("muon_m.decoder.layers.0.self_attention.linear_proj.weight").to_float_vector();
  for (int i = 0; i < rows * cols; ++i) EXPECT_FLOAT_EQ(m[i], g1[i] * 0.95f + g2[i]) << i;
}

TEST(Muon, WithoutNesterovUsesMomentumBuffer) {
  std::vector<float> w0 = random_values(12, 31);
  Tensor a = make_param(w0, {3, 4});
  Tensor b = make_param(w0, {3, 4});
  MuonOptions plain;
  plain.nesterov = false;
  plain.weight_decay = 0.0;
  Muon opt_plain({{"w", a}}, plain, mla_model());
  MuonOptions nest;
  nest.weight_decay = 0.0;
  Muon opt_nest({{"w", b}}, nest, mla_model());
  // First step: U = G (plain) vs G(1 + μ) (Nesterov) — the same direction after normalisation.
  std::vector<float> g = random_values(12, 32);
  set_grad(a, g);
  set_grad(b, g);
  opt_plain.step_with_lr(0.1);
  opt_nest.step_with_lr(0.1);
  std::vector<float> pa = a.to_float_vector(), pb = b.to_float_vector();
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(pa[i], pb[i], 2e-3);
  std::vector<double> u(g.begin(), g.end());
  std::vector<double> x = newton_schulz_double(u, 3, 4, 5);
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(pa[i], w0[i] - 0.1 * 2.0 * 0.2 * x[i], 3e-3);
}

// Per piece: gate and up halves of linear_fc1 get their own Newton–Schulz and their own
// sqrt(max(a, b)) — the update equals NS of each half, not of the whole matrix.
TEST(Muon, FusedFc1HalvesAreOrthogonalisedSeparately) {
  const int rows = 8, cols = 5;
  Tensor w = make_param(std::vector<float>(rows * cols, 0.f), {rows, cols});
  MuonOptions o;
  o.weight_decay = 0.0;
  o.nesterov = false;
  Muon opt({{"decoder.layers.1.mlp.linear_fc1.weight", w}}, o, mla_model());
  std::vector<float> g = random_bf16_values(rows * cols, 41);
  set_grad(w, g);
  opt.step_with_lr(0.5);
  std::vector<float> got = w.to_float_vector();
  NsWorkspace ws;
  for (int half = 0; half < 2; ++half) {
    std::vector<float> piece(g.begin() + half * 4 * cols, g.begin() + (half + 1) * 4 * cols);
    newton_schulz_bf16(piece.data(), 4, cols, o.ns_schedule, 1e-7f, ws);
    const float scale = 0.5f * (std::sqrt(5.f) * 0.2f);
    for (int i = 0; i < 4 * cols; ++i) EXPECT_FLOAT_EQ(got[half * 4 * cols + i], 0.f - scale * piece[i]) << i;
  }
}

// 3-D experts.weight1 [E, hidden, 2·ffn]: per expert, gate columns | up columns.
TEST(Muon, ExpertWeight1SplitsColumnsPerExpert) {
  const int e = 2, h = 4, f = 3;
  Tensor w = make_param(std::vector<float>(e * h * 2 * f, 0.f), {e, h, 2 * f});
  MuonOptions o;
  o.weight_decay = 0.0;
  o.nesterov = false;
  Muon opt({{"decoder.layers.1.mlp.experts.weight1", w}}, o, mla_model());
  std::vector<float> g = random_bf16_values(e * h * 2 * f, 51);
  set_grad(w, g);
  opt.step_with_lr(1.0);
  std::vector<float> got = w.to_float_vector();
  NsWorkspace ws;
  const float scale = 1.f * (std::sqrt(4.f) * 0.2f);
  for (int x = 0; x < e; ++x)
    for (int half = 0; half < 2; ++half) {
      std::vector<float> piece(h * f);
      for (int r = 0; r < h; ++r)
        for (int c = 0; c < f; ++c) piece[r * f + c] = g[(x * h + r) * 2 * f + half * f + c];
      newton_schulz_bf16(piece.data(), h, f, o.ns_schedule, 1e-7f, ws);
      for (int r = 0; r < h; ++r)
        for (int c = 0; c < f; ++c)
          EXPECT_FLOAT_EQ(got[(x * h + r) * 2 * f + half * f + c], -scale * piece[r * f + c]);
    }
}

TEST(MuonSplit, StandardSchemaBlocks) {
  MuonSplitSchema s = MuonSplitSchema::standard({2, 3, 2, 4, 8});
  EXPECT_EQ(s.blocks("decoder.layers.0.mlp.experts.weight1", {2, 4, 6}),
            (std::vector<MuonBlock>{{0, 4, 0, 3}, {0, 4, 3, 3}}));
  EXPECT_EQ(s.blocks("decoder.layers.0.mlp.experts.weight2", {2, 3, 4}),
            (std::vector<MuonBlock>{{0, 3, 0, 4}}));
  EXPECT_EQ(s.blocks("decoder.layers.0.self_attention.linear_qb.weight", {10, 8}),
            (std::vector<MuonBlock>{{0, 3, 0, 8}, {3, 2, 0, 8}, {5, 3, 0, 8}, {8, 2, 0, 8}}));
  EXPECT_EQ(s.blocks("mtp.layers.0.transformer_layer.self_attention.linear_q.weight", {10, 16}),
            (std::vector<MuonBlock>{{0, 3, 0, 16}, {3, 2, 0, 16}, {5, 3, 0, 16}, {8, 2, 0, 16}}));
  EXPECT_EQ(s.blocks("decoder.layers.0.self_attention.linear_kvb.weight", {14, 6}),
            (std::vector<MuonBlock>{{0, 3, 0, 6}, {3, 4, 0, 6}, {7, 3, 0, 6}, {10, 4, 0, 6}}));
  EXPECT_EQ(s.blocks("decoder.layers.0.mlp.shared_experts.linear_fc1.weight", {8, 5}),
            (std::vector<MuonBlock>{{0, 4, 0, 5}, {4, 4, 0, 5}}));
  EXPECT_EQ(s.blocks("decoder.layers.0.self_attention.linear_kva.weight", {11, 16}),
            (std::vector<MuonBlock>{{0, 11, 0, 16}}));
  EXPECT_THROW(s.blocks("decoder.layers.0.self_attention.linear_qb.weight", {11, 8}), ShapeError);
  EXPECT_THROW(s.blocks("decoder.layers.0.mlp.linear_fc1.weight", {7, 8}), ShapeError);
}

// The schema is extensible: a model can put its own rule first; rules must tile the matrix.
TEST(MuonSplit, CustomRulesAreCheckedForCoverage) {
  MuonSplitSchema s = MuonSplitSchema::standard({2, 3, 2, 4, 0});
  s.prepend({"*linear_qkv.weight"}, [](const std::string&, int64_t rows, int64_t cols) {
    return std::vector<MuonBlock>{{0, 2, 0, cols}, {2, rows - 2, 0, cols}};
  });
  EXPECT_EQ(s.blocks("decoder.layers.0.self_attention.linear_qkv.weight", {6, 4}),
            (std::vector<MuonBlock>{{0, 2, 0, 4}, {2, 4, 0, 4}}));
  s.prepend({"*bad*"}, [](const std::string&, int64_t rows, int64_t cols) {
    return std::vector<MuonBlock>{{0, rows - 1, 0, cols}};
  });
  EXPECT_THROW(s.blocks("bad.weight", {6, 4}), ShapeError);
}

// muon.py's routing: 2-D/3-D params use Muon unless adamw_include matches; 1-D params,
// embeddings and the output layer use AdamW; *max_logits_val* is skipped.
TEST(Muon, RoutesParamsBetweenMuonAndAdamW) {
  auto p = [](const Shape& s) { return make_param(std::vector<float>(s.numel(), 0.5f), s); };
  NamedParams ps = {{"embedding.word_embeddings.weight", p({8, 4})},
                    {"decoder.layers.0.input_layernorm.weight", p({4})},
                    {"decoder.layers.0.mlp.linear_fc2.weight", p({4, 4})},
                    {"decoder.layers.0.mlp.experts.weight2", p({2, 3, 4})},
                    {"decoder.layers.0.self_attention.core_attention.max_logits_val", p({2})},
                    {"output_layer.weight", p({8, 4})}};
  Muon opt(ps, MuonOptions{}, mla_model());
  EXPECT_EQ(opt.param_states().size(), 5u);
  EXPECT_EQ(opt.rule_of("embedding.word_embeddings.weight"), UpdateRule::adamw);
  EXPECT_EQ(opt.rule_of("decoder.layers.0.input_layernorm.weight"), UpdateRule::adamw);
  EXPECT_EQ(opt.rule_of("decoder.layers.0.mlp.linear_fc2.weight"), UpdateRule::muon);
  EXPECT_EQ(opt.rule_of("decoder.layers.0.mlp.experts.weight2"), UpdateRule::muon);
  EXPECT_EQ(opt.rule_of("output_layer.weight"), UpdateRule::adamw);
  auto st = opt.state_dict();
  EXPECT_EQ(st.count("muon_m.decoder.layers.0.mlp.linear_fc2.weight"), 1u);
  EXPECT_EQ(st.count("adam_m.output_layer.weight"), 1u);
  EXPECT_EQ(st.count("adam_v.decoder.layers.0.input_layernorm.weight"), 1u);
  EXPECT_EQ(st.count("muon_m.output_layer.weight"), 0u);
  MuonOptions custom;
  custom.adamw_include = {"*linear_fc2*"};
  Muon opt2(ps, custom, mla_model());
  EXPECT_EQ(opt2.rule_of("decoder.layers.0.mlp.linear_fc2.weight"), UpdateRule::adamw);
  EXPECT_EQ(opt2.rule_of("output_layer.weight"), UpdateRule::muon);
}

// The fallback AdamW uses adamw_betas / adamw_eps (default 0.95, 0.95).
TEST(Muon, AdamWFallbackUsesAdamwBetas) {
  Tensor n = make_param({1.f, -1.f}, {2});
  MuonOptions o;
  o.adamw_betas = {0.8, 0.9};
  Muon opt({{"decoder.final_layernorm.weight", n}}, o, mla_model());
  const float g1[] = {1.f, 2.f}, g2[] = {-1.f, 0.5f};
  double p[] = {1, -1}, m[] = {0, 0}, v[] = {0, 0};
  for (int t = 1; t <= 2; ++t) {
    const float* g = t == 1 ? g1 : g2;
    set_grad(n, {g[0], g[1]});
    opt.step_with_lr(0.01);
    for (int i = 0; i < 2; ++i) {
      m[i] = 0.8 * m[i] + 0.2 * g[i];
      v[i] = 0.9 * v[i] + 0.1 * g[i] * g[i];
      p[i] -= 0.01 / (1 - std::pow(0.8, t)) * m[i] / (std::sqrt(v[i] / (1 - std::pow(0.9, t))) + 1e-8);
    }
  }
  EXPECT_NEAR(n.to_float_vector()[0], p[0], 1e-6);
  EXPECT_NEAR(n.to_float_vector()[1], p[1], 1e-6);
}

// spec §1.2: construction errors, word for word.
TEST(Muon, ConstructionErrorsWordForWord) {
  MuonModelInfo no_mla = mla_model();
  no_mla.multi_latent_attention = false;
  MuonModelInfo legacy = mla_model();
  legacy.legacy = true;
  EXPECT_EQ(muon_error(MuonOptions{}, std::nullopt), "Model must be provided for Muon optimizer.");
  EXPECT_EQ(muon_error(MuonOptions{}, legacy), "Muon does not support Legacy Model.");
  EXPECT_EQ(muon_error(MuonOptions{}, no_mla).rfind(
                "Current Muon implementation only supports models with Multi-Latent Attention enabled.", 0),
            0u);
  EXPECT_EQ(muon_error(MuonOptions{}, mla_model(), true).rfind("Muon does not support swap.", 0), 0u);
  MuonOptions swap_opt;
  swap_opt.swap = true;
  EXPECT_EQ(muon_error(swap_opt, mla_model()).rfind("Muon does not support swap.", 0), 0u);
}

TEST(MuonOptions, ParsesSpecExampleAndValidates) {
  MuonOptions o = MuonOptions::from_json(yaml_like(R"({"type": "Muon", "weight_decay": 0.1,
      "momentum": 0.95, "matched_adamw_rms": 0.2, "nesterov": true, "eps": 1e-7, "ns_steps": 5,
      "ns_coefficients": [3.4445, -4.7750, 2.0315], "adamw_betas": [0.95, 0.95], "adamw_eps": 1e-8,
      "qk_clip_enabled": true, "qk_clip_threshold": 100, "comm_strategy": "allgather"})"));
  EXPECT_EQ(o.ns_schedule.size(), 5u);
  EXPECT_DOUBLE_EQ(o.qk_clip_threshold, 100.0);
  EXPECT_EQ(o.comm_strategy, "allgather");
  EXPECT_EQ(o.adamw_include, (std::vector<std::string>{"*word_embeddings*", "*output_layer*"}));
  MuonOptions d = MuonOptions::from_json(yaml_like(R"({"type": "Muon",
      "comm_strategy": "allgather_deredundency",
      "ns_coefficients": [[[3.4445, -4.7750, 2.0315], 8], [[2.0, -1.5, 0.5], 2]]})"));
  EXPECT_EQ(d.ns_schedule.size(), 10u);
  Tensor w = make_param(std::vector<float>(4, 0.f), {2, 2});
  Muon m({{"w", w}}, d, mla_model());
  EXPECT_EQ(m.comm_strategy(), "allgather_deredundency");

  MuonOptions bad_comm;
  bad_comm.comm_strategy = "p2p";
  EXPECT_NE(muon_error(bad_comm, mla_model()).find("optimizer.comm_strategy: must be 'allgather' or "
                                                   "'allgather_deredundency', got 'p2p'"),
            std::string::npos);
  MuonOptions bad_tau;
  bad_tau.qk_clip_threshold = 0;
  EXPECT_NE(muon_error(bad_tau, mla_model()).find("optimizer.qk_clip_threshold: must be > 0 while qk_clip_enabled is true"),
            std::string::npos);
  bad_tau.qk_clip_enabled = false;
  EXPECT_EQ(muon_error(bad_tau, mla_model()), "no error");
  EXPECT_THROW(MuonOptions::from_json(yaml_like(R"({"ns_steps": 0})")), ConfigError);
  // optimizer.betas is AdamW's: Muon's fallback takes adamw_betas, and says so for another value.
  OptionProblems problems;
  OptionReader reader(yaml_like(R"({"type": "Muon", "betas": [0.8, 0.9]})"), "optimizer", problems);
  MuonOptions::read(reader);
  EXPECT_EQ(problems.warnings(), (std::vector<std::string>{"optimizer.betas: is not used by Muon; its AdamW fallback "
                                                           "(embeddings, output layer, 1-D parameters) takes "
                                                           "optimizer.adamw_betas"}));
}

TEST(OptimizerFactory, MuonGetsModelAndSwapFromContext) {
  Tensor w = make_param(std::vector<float>(4, 0.f), {2, 2});
  OptimizerContext ctx;
  try {
    build_optimizer(yaml_like(R"({"type": "Muon"})"), {{"w", w}}, ctx);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "Model must be provided for Muon optimizer.");
  }
  ctx.model = mla_model();
  EXPECT_EQ(build_optimizer(yaml_like(R"({"type": "Muon"})"), {{"w", w}}, ctx)->type(), "Muon");
  ctx.swap = true;
  EXPECT_THROW(build_optimizer(yaml_like(R"({"type": "Muon"})"), {{"w", w}}, ctx), ValueError);
}

TEST(Muon, QuadraticToyConverges) {
  const int rows = 8, cols = 12;
  std::vector<float> target = random_values(rows * cols, 61);
  Tensor w = make_param(std::vector<float>(rows * cols, 0.f), {rows, cols});
  MuonOptions o;
  o.weight_decay = 0.0;
  Muon opt({{"decoder.layers.0.mlp.linear_fc2.weight", w}}, o, mla_model());
  opt.set_lr_scheduler(build_lr_scheduler(
      yaml_like(R"({"type": "cosine", "learning_rate": 0.5, "warmup_steps": 5})"), 300));
  auto loss = [&] {
    double l = 0;
    std::vector<float> x = w.to_float_vector();
    for (int i = 0; i < rows * cols; ++i) l += 0.5 * (x[i] - target[i]) * (x[i] - target[i]);
    return l;
  };
  const double initial = loss();
  for (int s = 0; s < 300; ++s) {
    std::vector<float> x = w.to_float_vector(), g(rows * cols);
    for (int i = 0; i < rows * cols; ++i) g[i] = x[i] - target[i];
    set_grad(w, g);
    opt.step();
  }
  EXPECT_LT(loss(), initial * 1e-3);
}
