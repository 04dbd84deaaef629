// cross_entropy and linear_cross_entropy: the token mean Σ ce·mask / (Σ mask + 1e-8) with mask =
// loss_mask · (labels != ignore_index) (MindFormers' CrossEntropyLoss), forward against a naive f64
// reference, gradcheck in f64, bf16 within tolerance, memory (no [N, V] fp32 buffers) and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "loom/autograd/engine.h"
#include "loom/autograd/grad_mode.h"
#include "loom/core/allocator.h"
#include "loom/kernels/cpu/cpu_isa.h"
#include "loom/ops/linear.h"
#include "loom/ops/loss.h"
#include "testing/error_message.h"
#include "testing/gradcheck.h"

using namespace loom;
using loom::testing::gradcheck;
using loom::testing::message_of;
using loom::testing::leaf;
using loom::testing::random_f64;

namespace {


// Naive f64 reference of MindFormers' CrossEntropyLoss.
double ref_loss(const std::vector<double>& logits, int64_t V, const std::vector<int64_t>& labels,
                const std::vector<double>& mask, int64_t ignore) {
  double num = 0, den = 0;
  for (size_t n = 0; n < labels.size(); ++n) {
    const double m = (labels[n] == ignore ? 0.0 : 1.0) * (mask.empty() ? 1.0 : mask[n]);
    den += m;
    if (m == 0) continue;
    double mx = -INFINITY;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, logits[n * V + v]);
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(logits[n * V + v] - mx);
    num += (mx + std::log(s) - logits[n * V + labels[n]]) * m;
  }
  return num / (den + 1e-8);
}

Tensor labels_of(const std::vector<int64_t>& v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}); }

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double scale = 1e-30, m = 0;
  for (double v : b) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m / scale;
}

}  // namespace

TEST(OpsCrossEntropy, ForwardMatchesReferenceWithMaskAndIgnoreIndex) {
  Tensor logits = random_f64({6, 11}, 1, -4, 4);
  std::vector<int64_t> lab = {3, -100, 0, 10, 7, 2};
  std::vector<double> mask = {1.0, 1.0, 0.5, 0.0, 1.0, 2.0};
  const double ref = ref_loss(logits.to_double_vector(), 11, lab, mask, -100);
  Tensor loss = ops::cross_entropy(logits, labels_of(lab), Tensor::from_vector(mask, {6}));
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_EQ(loss.dtype(), DType::f64);
  EXPECT_NEAR(loss.item(), ref, 1e-14);
  // No mask: every non-ignored label counts; a custom ignore_index.
  EXPECT_NEAR(ops::cross_entropy(logits, labels_of(lab)).item(),
              ref_loss(logits.to_double_vector(), 11, lab, {}, -100), 1e-14);
  std::vector<int64_t> lab2 = {3, 4, 0, 10, 7, 4};
  EXPECT_NEAR(ops::cross_entropy(logits, labels_of(lab2), Tensor(), 4).item(),
              ref_loss(logits.to_double_vector(), 11, lab2, {}, 4), 1e-14);
  // f32 logits: fp32 compute, float32 loss.
  Tensor l32 = ops::cross_entropy(logits.to(DType::f32), labels_of(lab), Tensor::from_vector(mask, {6}));
  EXPECT_EQ(l32.dtype(), DType::f32);
  EXPECT_NEAR(l32.item(), ref, 2e-6 * std::abs(ref));
}

TEST(OpsCrossEntropy, DenominatorEpsilonIsExact) {
  // Σ ce·mask / (Σ mask + 1e-8): one token gives ce/(1 + 1e-8), none gives exactly 0.
  Tensor logits = Tensor::from_vector(std::vector<double>{0.0, std::log(3.0)}, {1, 2});
  const double ce = std::log(4.0);  // −log(1/4)
  EXPECT_DOUBLE_EQ(ops::cross_entropy(logits, labels_of({0})).item(), ce / (1.0 + 1e-8));
  EXPECT_NE(ops::cross_entropy(logits, labels_of({0})).item(), ce);
  Tensor x = leaf({3, 4}, 2);
  Tensor loss = ops::cross_entropy(x, labels_of({-100, -100, 1}), Tensor::from_vector(std::vector<double>{1, 1, 0}, {3}));
  EXPECT_EQ(loss.item(), 0.0);
  autograd::backward(loss);
  for (double g : x.grad().to_double_vector()) EXPECT_EQ(g, 0.0);
  // A fractional mask sum: 0.25 weight on one token.
  EXPECT_DOUBLE_EQ(ops::cross_entropy(logits, labels_of({0}), Tensor::from_vector(std::vector<double>{0.25}, {1})).item(),
                   ce * 0.25 / (0.25 + 1e-8));
}

TEST(OpsCrossEntropy, GradcheckWithMaskAndIgnore) {
  Tensor x = leaf({5, 7}, 3, -3, 3);
  Tensor lab = labels_of({6, 0, -100, 3, 3});
  Tensor mask = Tensor::from_vector(std::vector<float>{1, 0.5f, 1, 0, 2}, {5});
  EXPECT_LT(gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::cross_entropy(in[0], lab, mask)}; }, {x}), 1e-6);
  // [B, S, V] logits with [B, S] labels.
  Tensor x3 = leaf({2, 3, 5}, 4, -2, 2);
  Tensor lab3 = Tensor::from_vector(std::vector<int32_t>{1, 4, 0, -100, 2, 2}, {2, 3}, DType::i32);
  EXPECT_LT(gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::cross_entropy(in[0], lab3)}; }, {x3}), 1e-6);
}

TEST(OpsCrossEntropy, LongRowsCrossVocabularyChunksAndStayStable) {
  // V = 10000 spans three 4096-wide chunks; large offsets check the running max.
  const int64_t N = 4, V = 10000;
  Tensor logits = random_f64({N, V}, 5, -6, 6);
  double* p = logits.data<double>();
  for (int64_t v = 0; v < V; ++v) p[1 * V + v] += 1000.0;   // huge logits: no overflow
  p[2 * V + 9000] = 60.0;                                    // max in the last chunk
  std::vector<int64_t> lab = {0, 9999, 9000, 4096};
  const double ref = ref_loss(logits.to_double_vector(), V, lab, {}, -100);
  EXPECT_NEAR(ops::cross_entropy(logits, labels_of(lab)).item(), ref, 1e-12);
  EXPECT_NEAR(ops::cross_entropy(logits.to(DType::f32), labels_of(lab)).item(), ref, 1e-5 * std::abs(ref));
}

TEST(OpsCrossEntropy, Bf16LogitsWithinTolerance) {
  const int64_t N = 8, V = 5000;
  Tensor lb = random_f64({N, V}, 6, -5, 5).to(DType::bf16);
  std::vector<int64_t> lab = {0, 1, 4999, 2500, -100, 7, 8, 4096};
  Tensor x = lb.clone();
  x.set_requires_grad(true);
  Tensor loss = ops::cross_entropy(x, labels_of(lab));
  EXPECT_EQ(loss.dtype(), DType::f32);
  // fp32 compute on the bf16 values: within 1e-5 of the exact loss of those values.
  const double ref = ref_loss(lb.to_double_vector(), V, lab, {}, -100);
  EXPECT_NEAR(loss.item(), ref, 1e-5 * ref);
  autograd::backward(loss);
  EXPECT_EQ(x.grad().dtype(), DType::f32);  // the leaf's main grad holds the bf16 dlogits exactly
  // dlogits = the fp32 backward rounded once to bf16.
  Tensor x32 = lb.to(DType::f32);
  x32.set_requires_grad(true);
  autograd::backward(ops::cross_entropy(x32, labels_of(lab)));
  std::vector<float> g = x.grad().to_float_vector(), g32 = x32.grad().to_float_vector();
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], round_to_bf16(g32[i]), std::abs(g32[i]) * 1e-5 + 1e-12) << i;
}

TEST(OpsCrossEntropy, Bf16NeverAllocatesAnFp32LogitsMatrix) {
  // The fused forward keeps per-row lse only; backward allocates just the bf16 dlogits.
  const int64_t N = 64, V = 8192;
  Tensor x = random_f64({N, V}, 7).to(DType::bf16);
  x.set_requires_grad(true);
  Tensor lab = Tensor::arange(N, DType::i64);
  reset_peak_memory();
  const int64_t before = memory_stats().current_bytes;
  Tensor loss = ops::cross_entropy(x, lab);
  EXPECT_LT(memory_stats().peak_bytes - before, N * V / 8) << "forward allocated a logits-sized buffer";
  reset_peak_memory();
  const int64_t before_bwd = memory_stats().current_bytes;
  std::vector<Tensor> g = autograd::grad({loss}, {x});  // the op's own grad, before any fp32 main grad
  EXPECT_EQ(g[0].dtype(), DType::bf16);
  EXPECT_LT(memory_stats().peak_bytes - before_bwd, N * V * 2 + N * V / 8) << "backward allocated more than the bf16 dlogits";
}

TEST(OpsCrossEntropy, LinearCrossEntropyEqualsLinearThenCrossEntropyF32) {
  const int64_t N = 13, D = 16, V = 37;
  Tensor h = random_f64({N, D}, 8).to(DType::f32), w = random_f64({V, D}, 9).to(DType::f32);
  std::vector<int64_t> lab = {0, 36, 5, -100, 5, 9, 12, 30, 31, 1, 2, 3, 4};
  Tensor mask = random_f64({N}, 10, 0.0, 1.0).to(DType::f32);
  Tensor hr = h.clone(), wr = w.clone();
  hr.set_requires_grad(true);
  wr.set_requires_grad(true);
  Tensor ref = ops::cross_entropy(ops::linear(hr, wr), labels_of(lab), mask);
  autograd::backward(ref);
  for (bool in_forward : {false, true}) {
    for (int64_t chunk : {1, 3, 0, 100}) {
      Tensor hl = h.clone(), wl = w.clone();
      hl.set_requires_grad(true);
      wl.set_requires_grad(true);
      Tensor loss = ops::linear_cross_entropy(hl, wl, labels_of(lab), mask, -100, chunk, in_forward);
      EXPECT_NEAR(loss.item(), ref.item(), 1e-6 * std::abs(ref.item())) << chunk;
      autograd::backward(loss);
      EXPECT_LT(max_rel_diff(hl.grad().to_double_vector(), hr.grad().to_double_vector()), 1e-6) << chunk << in_forward;
      EXPECT_LT(max_rel_diff(wl.grad().to_double_vector(), wr.grad().to_double_vector()), 1e-6) << chunk << in_forward;
    }
  }
}

// `ranks` threads stand in for the tensor-parallel ranks of a vocabulary-split head: each holds
// its rows and the VocabShard reduction meets the others at a barrier (every call of every rank).
struct ThreadRanks {
  explicit ThreadRanks(int n) : n(n), slots(static_cast<size_t>(n)) {}
  void all_reduce(int rank, void* data, int64_t count, DType dtype, bool max) {
    std::unique_lock<std::mutex> lock(mu);
    const int64_t es = static_cast<int64_t>(dtype_size(dtype));
    slots[static_cast<size_t>(rank)].assign(static_cast<char*>(data), static_cast<char*>(data) + count * es);
    const int64_t my_round = round;
    if (++arrived == n) {
      // Reduce in rank order into `result`, then release everyone.
      result = slots[0];
      for (int r = 1; r < n; ++r)
        for (int64_t i = 0; i < count; ++i) {
          auto combine = [&](auto* out, const auto* in) { out[i] = max ? std::max(out[i], in[i]) : out[i] + in[i]; };
          if (dtype == DType::f64) combine(reinterpret_cast<double*>(result.data()), reinterpret_cast<const double*>(slots[static_cast<size_t>(r)].data()));
          else combine(reinterpret_cast<float*>(result.data()), reinterpret_cast<const float*>(slots[static_cast<size_t>(r)].data()));
        }
      arrived = 0;
      ++round;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return round != my_round; });
    }
    std::memcpy(data, result.data(), static_cast<size_t>(count * es));
  }
  int n;
  std::vector<std::vector<char>> slots;
  std::vector<char> result;
  int arrived = 0;
  int64_t round = 0;
  std::mutex mu;
  std::condition_variable cv;
};

TEST(OpsCrossEntropy, VocabShardedLinearCrossEntropyEqualsTheWholeHead) {
  // The tensor-parallel head: each rank holds V/t rows, no rank forms a token's full logits; the
  // loss is the whole loss everywhere, the weight grads are the whole head's rows and the hidden
  // grads sum to the whole hidden grad.
  const int64_t N = 11, D = 8, V = 30;
  Tensor h = random_f64({N, D}, 21).to(DType::f32), w = random_f64({V, D}, 22).to(DType::f32);
  std::vector<int64_t> lab = {0, 29, 14, 15, -100, 7, 22, 9, 10, 1, 28};
  Tensor mask = random_f64({N}, 23, 0.0, 1.0).to(DType::f32);
  for (bool in_forward : {false, true}) {
    Tensor hr = h.clone(), wr = w.clone();
    hr.set_requires_grad(true);
    wr.set_requires_grad(true);
    Tensor ref = ops::linear_cross_entropy(hr, wr, labels_of(lab), mask, -100, 4, in_forward);
    autograd::backward(ref);
    for (int t : {2, 3}) {
      ThreadRanks ranks(t);
      std::vector<double> losses(static_cast<size_t>(t));
      std::vector<Tensor> dh(static_cast<size_t>(t)), dw(static_cast<size_t>(t));
      std::vector<std::thread> threads;
      for (int r = 0; r < t; ++r)
        threads.emplace_back([&, r] {
          const int64_t rows = V / t;
          kernels::VocabShard shard{r * rows, V, [&ranks, r](void* d, int64_t c, DType dt, bool max) {
                                      ranks.all_reduce(r, d, c, dt, max);
                                    }};
          Tensor hl = h.clone(), wl = w.narrow(0, r * rows, rows).clone();
          hl.set_requires_grad(true);
          wl.set_requires_grad(true);
          Tensor loss = ops::linear_cross_entropy(hl, wl, labels_of(lab), mask, -100, 4, in_forward, &shard);
          autograd::backward(loss);
          losses[static_cast<size_t>(r)] = loss.item();
          dh[static_cast<size_t>(r)] = hl.grad();
          dw[static_cast<size_t>(r)] = wl.grad();
        });
      for (auto& th : threads) th.join();
      std::vector<double> dh_sum(static_cast<size_t>(N * D), 0.0);
      for (int r = 0; r < t; ++r) {
        EXPECT_NEAR(losses[static_cast<size_t>(r)], ref.item(), 1e-6 * std::abs(ref.item())) << t << " ranks";
        const auto rows = wr.grad().narrow(0, r * (V / t), V / t).contiguous().to_double_vector();
        EXPECT_LT(max_rel_diff(dw[static_cast<size_t>(r)].to_double_vector(), rows), 1e-5) << t << " ranks, rank " << r;
        const auto d = dh[static_cast<size_t>(r)].to_double_vector();
        for (size_t i = 0; i < d.size(); ++i) dh_sum[i] += d[i];
      }
      EXPECT_LT(max_rel_diff(dh_sum, hr.grad().to_double_vector()), 1e-5) << t << " ranks, in forward " << in_forward;
    }
  }
  // A shard outside the vocabulary, or without its reduction, is refused.
  kernels::VocabShard bad{25, V, [](void*, int64_t, DType, bool) {}};
  EXPECT_THROW(ops::linear_cross_entropy(h, w.narrow(0, 0, 10), labels_of(lab), mask, -100, 0, false, &bad), ValueError);
}

TEST(OpsCrossEntropy, GradcheckLinearCrossEntropy) {
  Tensor h = leaf({2, 3, 4}, 11), w = leaf({9, 4}, 12);
  Tensor lab = Tensor::from_vector(std::vector<int64_t>{8, 0, -100, 4, 4, 2}, {2, 3});
  Tensor mask = Tensor::from_vector(std::vector<double>{1, 0.5, 1, 1, 0, 1}, {2, 3});
  for (bool in_forward : {false, true}) {
    for (int64_t chunk : {2, 0}) {
      EXPECT_LT(gradcheck([&](const std::vector<Tensor>& in) {
                  return std::vector<Tensor>{ops::linear_cross_entropy(in[0], in[1], lab, mask, -100, chunk, in_forward)};
                }, {h, w}), 1e-6) << chunk << in_forward;
    }
  }
  // An upstream grad scales the grads formed in forward (gradient accumulation divides by A).
  Tensor h2 = h.detach().clone(), h3 = h.detach().clone();
  h2.set_requires_grad(true);
  h3.set_requires_grad(true);
  autograd::backward(ops::linear_cross_entropy(h2, w.detach(), lab, mask, -100, 0, true), Tensor::scalar(0.25, DType::f64));
  autograd::backward(ops::linear_cross_entropy(h3, w.detach(), lab, mask, -100, 0, false), Tensor::scalar(0.25, DType::f64));
  EXPECT_LT(max_rel_diff(h2.grad().to_double_vector(), h3.grad().to_double_vector()), 1e-14);
}

TEST(OpsCrossEntropy, LinearCrossEntropyKeepsOnlyAChunkOfLogits) {
  const int64_t N = 256, D = 32, V = 4096, chunk = 16;
  Tensor h = random_f64({N, D}, 13).to(DType::f32), w = random_f64({V, D}, 14).to(DType::f32);
  h.set_requires_grad(true);
  w.set_requires_grad(true);
  Tensor lab = Tensor::arange(N, DType::i64);
  reset_peak_memory();
  const int64_t before = memory_stats().current_bytes;
  Tensor loss = ops::linear_cross_entropy(h, w, lab, Tensor(), -100, chunk);
  autograd::backward(loss);
  const int64_t full_logits = N * V * 4;
  // A chunk of logits, the grads ([V, D] + [N, D]) and small vectors; never N × V.
  EXPECT_LT(memory_stats().peak_bytes - before, chunk * V * 4 + 2 * (V * D + N * D) * 4 + (1 << 16));
  EXPECT_LT(memory_stats().peak_bytes - before, full_logits / 2);
}

TEST(OpsCrossEntropy, Bf16LinearCrossEntropyMatchesFp32OnSameValues) {
  const int64_t N = 24, D = 32, V = 300;
  Tensor hb = random_f64({N, D}, 15).to(DType::bf16), wb = random_f64({V, D}, 16).to(DType::bf16);
  Tensor lab = Tensor::arange(N, DType::i64);
  hb.set_requires_grad(true);
  wb.set_requires_grad(true);
  Tensor loss = ops::linear_cross_entropy(hb, wb, lab);
  autograd::backward(loss);
  Tensor h32 = hb.detach().to(DType::f32), w32 = wb.detach().to(DType::f32);
  h32.set_requires_grad(true);
  w32.set_requires_grad(true);
  Tensor loss32 = ops::linear_cross_entropy(h32, w32, lab);
  autograd::backward(loss32);
  EXPECT_NEAR(loss.item(), loss32.item(), 1e-6 * loss32.item());
  EXPECT_EQ(hb.grad().dtype(), DType::f32);  // fp32 main grads of bf16 leaves
  EXPECT_EQ(wb.grad().dtype(), DType::f32);
  EXPECT_LT(max_rel_diff(hb.grad().to_double_vector(), h32.grad().to_double_vector()), 8e-3);
  // On the fp32 path the head widens bf16 operands to fp32, so dweight is the fp32 one up to
  // summation order. On a bf16 matrix path its GEMM operands stay bf16 and the dlogits are rounded
  // to bf16 (2^-8 relative) before dweight's product: bf16 tolerance, as for dhidden.
  const bool bf16_units = kernels::cpu::bf16_matrix_units();
  EXPECT_LT(max_rel_diff(wb.grad().to_double_vector(), w32.grad().to_double_vector()), bf16_units ? 8e-3 : 1e-6);
}

TEST(OpsCrossEntropy, ErrorsNamePositionsAndShapes) {
  Tensor x = Tensor::zeros({3, 5});
  std::string m = message_of([&] { ops::cross_entropy(x, labels_of({0, 7, 1})); });
  EXPECT_NE(m.find("cross_entropy: labels[1] = 7 is outside the vocabulary [0, 5) and is not ignore_index (-100)"), std::string::npos) << m;
  EXPECT_THROW(ops::cross_entropy(x, labels_of({0, -1, 1})), ValueError);
  m = message_of([&] { ops::cross_entropy(Tensor::zeros({2, 2, 5}), Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 5}, {2, 2})); });
  EXPECT_NE(m.find("labels[1, 1] = 5"), std::string::npos) << m;
  m = message_of([&] { ops::cross_entropy(x, labels_of({0, 1})); });
  EXPECT_NE(m.find("cross_entropy: labels have shape [2] but logits [3, 5] needs one label per row, i.e. [3]"), std::string::npos) << m;
  m = message_of([&] { ops::cross_entropy(x, labels_of({0, 1, 2}), Tensor::ones({2})); });
  EXPECT_NE(m.find("loss_mask has shape [2] but labels have shape [3]"), std::string::npos) << m;
  EXPECT_THROW(ops::cross_entropy(x, Tensor::zeros({3})), DTypeError);
  EXPECT_THROW(ops::cross_entropy(Tensor::zeros({3, 5}, DType::i64), labels_of({0, 1, 2})), DTypeError);
  m = message_of([&] { ops::linear_cross_entropy(Tensor::zeros({3, 4}), Tensor::zeros({5, 4}), labels_of({0, 5, 1})); });
  EXPECT_NE(m.find("linear_cross_entropy: labels[1] = 5 is outside the vocabulary [0, 5)"), std::string::npos) << m;
  m = message_of([&] { ops::linear_cross_entropy(Tensor::zeros({3, 4}), Tensor::zeros({5, 6}), labels_of({0, 1, 1})); });
  EXPECT_NE(m.find("linear_cross_entropy: hidden [3, 4] has last dim 4 but weight [5, 6] expects 6"), std::string::npos) << m;
}
