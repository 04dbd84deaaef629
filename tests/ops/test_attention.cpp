// ops::attention (flash-style): forward against a naive materialised-score reference, f64
// finite-difference grads in every mask mode, f32/bf16 against f64, determinism across thread
// counts, per-head max logits (Muon QK-clip), document masks from MindFormers' compressed
// actual_seq_len, MLA-style Dv != D with a custom scale (DeepSeek-V3), errors and memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "loom/autograd/engine.h"
#include "loom/autograd/grad_mode.h"
#include "loom/core/allocator.h"
#include "loom/core/parallel.h"
#include "loom/kernels/cpu/attention.h"
#include "loom/kernels/cpu/vec.h"
#include "loom/ops/attention.h"
#include "loom/ops/shape.h"
#include "testing/gradcheck.h"

using namespace loom;
using loom::testing::gradcheck;
using loom::testing::leaf;
using loom::testing::random_f64;
namespace kc = loom::kernels::cpu;

namespace {

using Docs = std::vector<std::vector<int64_t>>;

Tensor docs_tensor(const Docs& docs, DType dtype = DType::i64) {
  std::vector<int64_t> flat;
  for (const auto& row : docs) flat.insert(flat.end(), row.begin(), row.end());
  Tensor t = Tensor::from_vector(flat, {static_cast<int64_t>(docs.size()), static_cast<int64_t>(docs[0].size())});
  return t.to(dtype);
}

// Document of a position under the documented semantics: the first d with ends[d] > p; none (-1)
// before 0 or at/after the last end.
int64_t doc_of(const std::vector<int64_t>& ends, int64_t p) {
  if (p < 0 || p >= ends.back()) return -1;
  int64_t d = 0;
  while (ends[d] <= p) ++d;
  return d;
}

struct NaiveResult {
  std::vector<double> out;         // [B, Sq, H, Dv]
  std::vector<double> max_logits;  // [H]
};

// Materialises every score: the definition the kernel must match.
NaiveResult naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                            bool causal, int64_t q_offset, const Docs& docs) {
  const int64_t B = q.size(0), Sq = q.size(1), H = q.size(2), D = q.size(3);
  const int64_t Sk = k.size(1), KV = k.size(2), Dv = v.size(3), G = H / KV;
  auto qv = q.contiguous().to_double_vector(), kv = k.contiguous().to_double_vector(),
       vv = v.contiguous().to_double_vector();
  NaiveResult r;
  r.out.assign(B * Sq * H * Dv, 0.0);
  r.max_logits.assign(H, -std::numeric_limits<double>::infinity());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t p = i + q_offset;
        std::vector<double> s(Sk);
        std::vector<bool> vis(Sk);
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Sk; ++j) {
          bool ok = !causal || j <= p;
          if (!docs.empty()) {
            const int64_t dq = doc_of(docs[b], p), dk = doc_of(docs[b], j);
            ok = ok && dq >= 0 && dq == dk;
          }
          vis[j] = ok;
          double dotp = 0;
          for (int64_t x = 0; x < D; ++x)
            dotp += qv[((b * Sq + i) * H + h) * D + x] * kv[((b * Sk + j) * KV + h / G) * D + x];
          s[j] = scale * dotp;
          if (ok) mx = std::max(mx, s[j]);
        }
        r.max_logits[h] = std::max(r.max_logits[h], mx);
        double z = 0;
        for (int64_t j = 0; j < Sk; ++j) z += vis[j] ? std::exp(s[j] - mx) : 0.0;
        if (z == 0) continue;
        for (int64_t j = 0; j < Sk; ++j) {
          if (!vis[j]) continue;
          const double w = std::exp(s[j] - mx) / z;
          for (int64_t x = 0; x < Dv; ++x)
            r.out[((b * Sq + i) * H + h) * Dv + x] += w * vv[((b * Sk + j) * KV + h / G) * Dv + x];
        }
      }
  return r;
}

struct Case {
  std::string name;
  int64_t B, Sq, Sk, H, KV, D, Dv;
  bool causal;
  int64_t q_offset;
  Docs docs;
  double scale;  // 0 = default
};

// The mask modes every test walks through.
std::vector<Case> mask_cases() {
  return {
      {"full", 2, 5, 5, 2, 2, 3, 3, false, 0, {}, 0},
      {"causal", 2, 6, 6, 2, 2, 3, 3, true, 0, {}, 0},
      {"causal_gqa_dv", 1, 6, 6, 4, 2, 4, 3, true, 0, {}, 0},
      {"documents", 2, 7, 7, 2, 1, 3, 2, true, 0, {{2, 5, 7}, {3, 7, 7}}, 0},
      {"documents_tail_unowned", 1, 6, 6, 2, 2, 3, 3, true, 0, {{2, 4, 4}}, 0},
      {"documents_noncausal", 1, 6, 6, 2, 2, 3, 3, false, 0, {{1, 4, 6}}, 0},
      {"q_offset", 1, 3, 7, 2, 1, 3, 3, true, 4, {}, 0},
      {"q_offset_negative", 1, 5, 5, 2, 2, 3, 3, true, -2, {}, 0},
      {"documents_q_offset", 1, 4, 9, 2, 1, 3, 3, true, 5, {{3, 7, 9}}, 0},
      {"mla_scale", 1, 5, 5, 2, 2, 6, 4, true, 0, {}, 0.37},
  };
}

ops::AttentionOptions options_of(const Case& c) {
  ops::AttentionOptions o;
  o.causal = c.causal;
  o.q_offset = c.q_offset;
  o.softmax_scale = c.scale;
  if (!c.docs.empty()) o.doc_ends = docs_tensor(c.docs);
  return o;
}

double scale_of(const Case& c) { return c.scale != 0 ? c.scale : 1.0 / std::sqrt(double(c.D)); }

kc::AttentionMask mask_of(const Case& c) {
  return {c.causal, c.q_offset, c.docs.empty() ? Tensor() : docs_tensor(c.docs), Tensor()};
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::abs(v));
  return m;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

struct FwdBwd {
  Tensor out, dq, dk, dv;
};

// Forward and backward through the op (autograd), with a fixed output grad.
FwdBwd run_op(const Tensor& q0, const Tensor& k0, const Tensor& v0, const ops::AttentionOptions& o,
              const Tensor& dout) {
  Tensor q = q0.clone(), k = k0.clone(), v = v0.clone();
  q.set_requires_grad(true);
  k.set_requires_grad(true);
  v.set_requires_grad(true);
  FwdBwd r;
  r.out = ops::attention(q, k, v, o);
  autograd::backward(r.out, dout.to(r.out.dtype()));
  r.dq = q.grad();
  r.dk = k.grad();
  r.dv = v.grad();
  return r;
}

template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

TEST(OpsAttention, ForwardMatchesNaiveInEveryMaskMode) {
  for (const Case& c : mask_cases()) {
    Tensor q = random_f64({c.B, c.Sq, c.H, c.D}, 1, -2, 2), k = random_f64({c.B, c.Sk, c.KV, c.D}, 2, -2, 2),
           v = random_f64({c.B, c.Sk, c.KV, c.Dv}, 3);
    Tensor out = ops::attention(q, k, v, options_of(c));
    ASSERT_EQ(out.shape(), Shape({c.B, c.Sq, c.H, c.Dv})) << c.name;
    NaiveResult want = naive_attention(q, k, v, scale_of(c), c.causal, c.q_offset, c.docs);
    EXPECT_LT(max_abs_diff(out.to_double_vector(), want.out), 1e-13) << c.name;
  }
}

TEST(OpsAttention, RowsWithoutVisibleKeysAreZeroNotNaN) {
  // q_offset -3: query rows 0..2 precede every key; doc ends [2, 4] leave positions 4, 5 unowned.
  Tensor q = random_f64({1, 6, 1, 4}, 4), k = random_f64({1, 6, 1, 4}, 5), v = random_f64({1, 6, 1, 4}, 6);
  ops::AttentionOptions o;
  o.q_offset = -3;
  auto out = ops::attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), o).to_double_vector();
  for (int i = 0; i < 3 * 4; ++i) EXPECT_EQ(out[i], 0.0) << i;
  for (int i = 3 * 4; i < 6 * 4; ++i) EXPECT_TRUE(std::isfinite(out[i])) << i;
  ops::AttentionOptions d;
  d.doc_ends = docs_tensor({{2, 4, 4}}, DType::i32);
  FwdBwd r = run_op(q, k, v, d, random_f64({1, 6, 1, 4}, 7));
  auto o2 = r.out.to_double_vector(), dq = r.dq.to_double_vector();
  for (int i = 4 * 4; i < 6 * 4; ++i) {
    EXPECT_EQ(o2[i], 0.0) << i;
    EXPECT_EQ(dq[i], 0.0) << i;
  }
  for (double x : r.dk.to_double_vector()) EXPECT_TRUE(std::isfinite(x));
}

TEST(OpsAttention, GradcheckQKVInEveryMaskMode) {
  for (const Case& c : mask_cases()) {
    Tensor q = leaf({c.B, c.Sq, c.H, c.D}, 11, -2, 2), k = leaf({c.B, c.Sk, c.KV, c.D}, 12, -2, 2),
           v = leaf({c.B, c.Sk, c.KV, c.Dv}, 13);
    const ops::AttentionOptions o = options_of(c);
    EXPECT_LT(gradcheck([o](const std::vector<Tensor>& in) {
                return std::vector<Tensor>{ops::attention(in[0], in[1], in[2], o)};
              }, {q, k, v}, 1e-6, 1e-6, c.name), 1e-6) << c.name;
  }
}

TEST(OpsAttention, SmallTilesMatchDefaultTilesExactlyInF64) {
  // Odd tile sizes put every tile edge, skipped tile and dQ key chunk through the f64 path.
  const kc::AttentionTiles tiny{3, 4, 2, 5};
  for (Case c : mask_cases()) {
    c.Sq += 6;
    c.Sk += 6;
    if (!c.docs.empty())
      for (auto& row : c.docs)
        for (auto& e : row) e = e == c.Sk - 6 ? c.Sk : e + 3;
    Tensor q = random_f64({c.B, c.Sq, c.H, c.D}, 21, -2, 2), k = random_f64({c.B, c.Sk, c.KV, c.D}, 22, -2, 2),
           v = random_f64({c.B, c.Sk, c.KV, c.Dv}, 23), dout = random_f64({c.B, c.Sq, c.H, c.Dv}, 24);
    const kc::AttentionMask m = mask_of(c);
    auto ref = kc::attention_forward(q, k, v, scale_of(c), m, true);
    auto got = kc::attention_forward(q, k, v, scale_of(c), m, true, tiny);
    NaiveResult want = naive_attention(q, k, v, scale_of(c), c.causal, c.q_offset, c.docs);
    EXPECT_LT(max_abs_diff(got.out.to_double_vector(), want.out), 1e-13) << c.name;
    EXPECT_LT(max_abs_diff(got.out.to_double_vector(), ref.out.to_double_vector()), 1e-13) << c.name;
    auto gr = kc::attention_backward(dout, q, k, v, ref.out, ref.lse, scale_of(c), m);
    auto gt = kc::attention_backward(dout, q, k, v, got.out, got.lse, scale_of(c), m, tiny);
    EXPECT_LT(max_abs_diff(gt.dq.to_double_vector(), gr.dq.to_double_vector()), 1e-12) << c.name;
    EXPECT_LT(max_abs_diff(gt.dk.to_double_vector(), gr.dk.to_double_vector()), 1e-12) << c.name;
    EXPECT_LT(max_abs_diff(gt.dv.to_double_vector(), gr.dv.to_double_vector()), 1e-12) << c.name;
  }
}

TEST(OpsAttention, Float32MatchesFloat64AtS300) {
  // S = 300 is not a multiple of any tile: partial q and k blocks, partial diagonal tiles.
  const int64_t B = 1, S = 300, H = 4, KV = 2, D = 64, Dv = 32;
  Tensor q = random_f64({B, S, H, D}, 31, -2, 2), k = random_f64({B, S, KV, D}, 32, -2, 2),
         v = random_f64({B, S, KV, Dv}, 33), dout = random_f64({B, S, H, Dv}, 34);
  for (int mode = 0; mode < 2; ++mode) {
    ops::AttentionOptions o;
    if (mode == 1) o.doc_ends = docs_tensor({{37, 200, 300}});
    FwdBwd ref = run_op(q, k, v, o, dout);
    FwdBwd got = run_op(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), o, dout);
    EXPECT_EQ(got.out.dtype(), DType::f32);
    const std::vector<std::pair<Tensor, Tensor>> pairs = {{got.out, ref.out}, {got.dq, ref.dq}, {got.dk, ref.dk}, {got.dv, ref.dv}};
    for (size_t i = 0; i < pairs.size(); ++i) {
      auto g = pairs[i].first.to_double_vector(), r = pairs[i].second.to_double_vector();
      EXPECT_LT(max_abs_diff(g, r), 1e-5 * std::max(1.0, max_abs(r))) << "mode " << mode << " tensor " << i;
    }
  }
}

TEST(OpsAttention, ReducedPrecisionWithinTolerance) {
  // bf16/f16 inputs are widened to fp32, computed in fp32 and rounded once: the error is that of
  // one rounding of each result (bf16: 2^-8 relative) plus the rounded output feeding D = rowsum(dO∘O).
  // (bf16 on a bf16 matrix path also rounds P and dS as operands, within the same bound:
  // tests/kernels/test_attention_bf16.cpp.)
  // Stated tolerance: max |err| <= 1e-2 · max |ref| for bf16 (1e-3 for f16), forward and grads.
  const int64_t B = 2, S = 70, H = 4, KV = 1, D = 32;
  for (DType dt : {DType::bf16, DType::f16}) {
    const double tol = dt == DType::bf16 ? 1e-2 : 1e-3;
    Tensor q = random_f64({B, S, H, D}, 41, -2, 2).to(dt), k = random_f64({B, S, KV, D}, 42, -2, 2).to(dt),
           v = random_f64({B, S, KV, D}, 43).to(dt), dout = random_f64({B, S, H, D}, 44).to(dt);
    ops::AttentionOptions o;
    o.doc_ends = docs_tensor({{30, 70}, {70, 70}});
    FwdBwd got = run_op(q, k, v, o, dout);
    EXPECT_EQ(got.out.dtype(), dt);
    FwdBwd ref = run_op(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64), o, dout.to(DType::f64));
    const std::vector<std::pair<Tensor, Tensor>> pairs = {{got.out, ref.out}, {got.dq, ref.dq}, {got.dk, ref.dk}, {got.dv, ref.dv}};
    for (size_t i = 0; i < pairs.size(); ++i) {
      auto g = pairs[i].first.to_double_vector(), r = pairs[i].second.to_double_vector();
      EXPECT_LT(max_abs_diff(g, r), tol * max_abs(r)) << dtype_name(dt) << " tensor " << i;
    }
  }
}

TEST(OpsAttention, SameBitsWithOneAndTwoThreads) {
  const int before = num_threads();
  const int64_t B = 2, S = 300, H = 4, KV = 2, D = 64;
  Tensor q = random_f64({B, S, H, D}, 51, -2, 2).to(DType::f32), k = random_f64({B, S, KV, D}, 52, -2, 2).to(DType::f32),
         v = random_f64({B, S, KV, D}, 53).to(DType::f32), dout = random_f64({B, S, H, D}, 54).to(DType::f32);
  for (bool docs : {false, true}) {
    kc::AttentionMask m{true, 0, docs ? docs_tensor({{100, 300, 300}, {17, 290, 300}}) : Tensor(), Tensor()};
    std::vector<std::vector<float>> runs[2];
    for (int t : {1, 2}) {
      set_num_threads(t);
      auto f = kc::attention_forward(q, k, v, 0.125, m, true);
      auto g = kc::attention_backward(dout, q, k, v, f.out, f.lse, 0.125, m);
      runs[t - 1] = {f.out.to_float_vector(), f.lse.to_float_vector(), f.max_logits.to_float_vector(),
                     g.dq.to_float_vector(), g.dk.to_float_vector(), g.dv.to_float_vector()};
    }
    set_num_threads(before);
    for (size_t i = 0; i < runs[0].size(); ++i) {
      ASSERT_EQ(runs[0][i].size(), runs[1][i].size());
      size_t differing = 0;
      for (size_t e = 0; e < runs[0][i].size(); ++e)
        differing += float_bits(runs[0][i][e]) != float_bits(runs[1][i][e]);
      EXPECT_EQ(differing, 0u) << "docs=" << docs << " tensor " << i;
    }
  }
}

TEST(OpsAttention, MaxLogitsPerHeadMatchNaive) {
  // MindFormers' _update_max_logits: S_h = max over batch and sequence of softmax_scale·q·k
  // (visible entries).
  for (const Case& c : mask_cases()) {
    Tensor q = random_f64({c.B, c.Sq, c.H, c.D}, 61, -2, 2), k = random_f64({c.B, c.Sk, c.KV, c.D}, 62, -2, 2),
           v = random_f64({c.B, c.Sk, c.KV, c.Dv}, 63);
    ops::AttentionOptions o = options_of(c);
    o.track_max_logits = true;
    NaiveResult want = naive_attention(q, k, v, scale_of(c), c.causal, c.q_offset, c.docs);
    for (DType dt : {DType::f64, DType::f32}) {
      Tensor ml;
      ops::attention(q.to(dt), k.to(dt), v.to(dt), o, &ml);
      ASSERT_EQ(ml.shape(), Shape({c.H})) << c.name;
      EXPECT_EQ(ml.dtype(), DType::f32);
      auto got = ml.to_double_vector();
      for (int64_t h = 0; h < c.H; ++h)
        EXPECT_NEAR(got[h], want.max_logits[h], 1e-5 * std::max(1.0, std::abs(want.max_logits[h])))
            << c.name << " head " << h << " " << dtype_name(dt);
    }
  }
  Tensor unused = Tensor::ones({1});
  ops::attention(random_f64({1, 2, 1, 2}, 1), random_f64({1, 2, 1, 2}, 2), random_f64({1, 2, 1, 2}, 3), {}, &unused);
  EXPECT_FALSE(unused.defined()) << "max_logits is reset when tracking is off";
}

TEST(OpsAttention, StridedViewsOfAFusedProjection) {
  // q, k, v as head slices of one fused [B, S, H + 2·KV, D] tensor, and a [B, H, S, D] transpose.
  const int64_t B = 2, S = 37, H = 4, KV = 2, D = 16;
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor fused = random_f64({B, S, H + 2 * KV, D}, 71, -2, 2).to(dt);
    fused.set_requires_grad(true);
    Tensor q = ops::narrow(fused, 2, 0, H), k = ops::narrow(fused, 2, H, KV), v = ops::narrow(fused, 2, H + KV, KV);
    EXPECT_FALSE(q.is_contiguous());
    Tensor dout = random_f64({B, S, H, D}, 72).to(dt);
    Tensor out = ops::attention(q, k, v);
    autograd::backward(out, dout);
    FwdBwd ref = run_op(q.detach().contiguous(), k.detach().contiguous(), v.detach().contiguous(), {}, dout);
    const double tol = dt == DType::f64 ? 1e-13 : 1e-6;
    EXPECT_LT(max_abs_diff(out.to_double_vector(), ref.out.to_double_vector()), tol);
    Tensor g = fused.grad();
    EXPECT_LT(max_abs_diff(g.narrow(2, 0, H).contiguous().to_double_vector(), ref.dq.to_double_vector()), tol);
    EXPECT_LT(max_abs_diff(g.narrow(2, H, KV).contiguous().to_double_vector(), ref.dk.to_double_vector()), tol);
    EXPECT_LT(max_abs_diff(g.narrow(2, H + KV, KV).contiguous().to_double_vector(), ref.dv.to_double_vector()), tol);
    Tensor qt = random_f64({B, H, S, D}, 73).to(dt).transpose(1, 2);
    auto o1 = ops::attention(qt, k.detach(), v.detach()).to_double_vector();
    auto o2 = ops::attention(qt.contiguous(), k.detach().contiguous(), v.detach().contiguous()).to_double_vector();
    EXPECT_LT(max_abs_diff(o1, o2), tol);
  }
}

TEST(OpsAttention, ErrorsNameTheOpShapesAndRule) {
  Tensor q = Tensor::zeros({2, 5, 4, 8}), k = Tensor::zeros({2, 5, 2, 8}), v = Tensor::zeros({2, 5, 2, 6});
  auto has = [](const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  };
  std::string m = error_of<ShapeError>([&] { ops::attention(Tensor::zeros({2, 5, 32}), k, v); });
  has(m, "attention: q [2, 5, 32] must be 4-D");
  m = error_of<ShapeError>([&] { ops::attention(q, Tensor::zeros({2, 5, 3, 8}), Tensor::zeros({2, 5, 3, 6})); });
  has(m, "query heads (4) must be a multiple of kv heads (3)");
  m = error_of<ShapeError>([&] { ops::attention(q, Tensor::zeros({2, 5, 2, 7}), v); });
  has(m, "q and k head dims (dim 3) must be equal (8 vs 7)");
  has(m, "k [2, 5, 2, 7]");
  m = error_of<ShapeError>([&] { ops::attention(q, Tensor::zeros({1, 5, 2, 8}), Tensor::zeros({1, 5, 2, 6})); });
  has(m, "batch sizes (dim 0) must be equal");
  m = error_of<ShapeError>([&] { ops::attention(q, k, Tensor::zeros({2, 4, 2, 6})); });
  has(m, "k and v must have the same sequence length");
  m = error_of<ShapeError>([&] { ops::attention(q, k, Tensor::zeros({2, 5, 1, 6})); });
  has(m, "same number of kv heads");
  m = error_of<DTypeError>([&] { ops::attention(q, k.to(DType::bf16), v); });
  has(m, "q, k and v must share one dtype, got q float32, k bfloat16");
  m = error_of<DTypeError>([&] { ops::attention(q.to(DType::i32), k.to(DType::i32), v.to(DType::i32)); });
  has(m, "attention");
  ops::AttentionOptions o;
  o.doc_ends = Tensor::zeros({2, 3});
  m = error_of<DTypeError>([&] { ops::attention(q, k, v, o); });
  has(m, "doc_ends must be int32 or int64, got float32");
  o.doc_ends = docs_tensor({{5}});
  m = error_of<ShapeError>([&] { ops::attention(q, k, v, o); });
  has(m, "doc_ends [1, 1] must be [batch, K] = [2, K>=1]");
  o.doc_ends = docs_tensor({{2, 5}, {4, 3}});
  m = error_of<ValueError>([&] { ops::attention(q, k, v, o); });
  has(m, "doc_ends[1][1] = 3 is smaller than doc_ends[1][0] = 4: document ends must be ascending");
  o.doc_ends = docs_tensor({{2, 6}, {5, 5}});
  m = error_of<ValueError>([&] { ops::attention(q, k, v, o); });
  has(m, "doc_ends[0][1] = 6 is outside [0, 5]");
  ops::AttentionOptions t;
  t.track_max_logits = true;
  m = error_of<ValueError>([&] { ops::attention(q, k, v, t); });
  has(m, "track_max_logits is set but no max_logits output was passed");
  ops::AttentionOptions s;
  s.softmax_scale = std::numeric_limits<double>::infinity();
  m = error_of<ValueError>([&] { ops::attention(q, k, v, s); });
  has(m, "softmax_scale = inf is not finite");
}

TEST(OpsAttention, ForwardAtS2048NeverHoldsTheScoreMatrix) {
  // Flash-style: scratch is O(block²) per thread, far below one S×S fp32 matrix per head.
  const int64_t S = 2048, H = 2, D = 64;
  autograd::NoGradGuard no_grad;
  Tensor q = random_f64({1, S, H, D}, 81).to(DType::f32), k = random_f64({1, S, H, D}, 82).to(DType::f32),
         v = random_f64({1, S, H, D}, 83).to(DType::f32);
  reset_peak_memory();
  const int64_t base = memory_stats().current_bytes;
  Tensor out = ops::attention(q, k, v);
  const int64_t peak = memory_stats().peak_bytes;
  const int64_t outputs = static_cast<int64_t>(CachingAllocator::size_class(out.nbytes()) +
                                               CachingAllocator::size_class(size_t(H * S * 4)));  // + lse
  const int64_t scratch = peak - base - outputs;
  const int64_t score_matrix = S * S * 4;  // one head
  EXPECT_LT(scratch, score_matrix / 16) << "scratch bytes " << scratch;
  EXPECT_TRUE(std::isfinite(out.to_double_vector()[S * H * D - 1]));
}

TEST(OpsAttention, VectorisedExpWithinTwoUlp) {
  std::vector<float> xs;
  for (float x = -110.f; x < 92.f; x += 0.0137f) xs.push_back(x);
  for (float x : {0.f, -0.f, 1e-30f, -1e-30f, 88.72f, 88.73f, -87.33f, -103.9f, -104.f}) xs.push_back(x);
  std::vector<float> got = xs;
  kc::vec::exp_shift_sum(got.data(), static_cast<int64_t>(got.size()), 0.f);
  int worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float want = static_cast<float>(std::exp(static_cast<double>(xs[i])));
    const int ulps = std::abs(static_cast<int>(float_bits(got[i])) - static_cast<int>(float_bits(want)));
    worst = std::max(worst, ulps);
    ASSERT_LE(ulps, 2) << "exp(" << xs[i] << ") = " << got[i] << " want " << want;
  }
  std::vector<float> special = {-INFINITY, INFINITY, NAN, 200.f, -200.f, 1.f, 2.f, 3.f, 4.f};
  kc::vec::exp_shift_sum(special.data(), 9, 0.f);
  EXPECT_EQ(special[0], 0.f);
  EXPECT_EQ(special[1], INFINITY);
  EXPECT_TRUE(std::isnan(special[2]));
  EXPECT_EQ(special[3], INFINITY);
  EXPECT_EQ(special[4], 0.f);
  EXPECT_LE(worst, 2);
}

TEST(OpsAttention, VectorisedBf16RoundingMatchesScalar) {
  std::vector<float> xs;
  uint32_t state = 12345;
  for (int i = 0; i < 4096; ++i) {
    state = state * 1664525u + 1013904223u;
    float f;
    std::memcpy(&f, &state, 4);
    xs.push_back(f);
  }
  for (float f : {0.f, -0.f, INFINITY, -INFINITY, NAN, 1.00390625f /* tie */, 1.01171875f /* tie up */,
                  3.4e38f, 1e-40f})
    xs.push_back(f);
  std::vector<bf16> got(xs.size());
  kc::vec::narrow_row(xs.data(), got.data(), static_cast<int64_t>(xs.size()));
  std::vector<float> back(xs.size());
  kc::vec::widen_row(got.data(), back.data(), static_cast<int64_t>(xs.size()));
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_EQ(got[i].bits, bf16::from_float(xs[i])) << "x = " << xs[i];
    ASSERT_EQ(float_bits(back[i]), float_bits(bf16::to_float(got[i].bits)));
  }
}
