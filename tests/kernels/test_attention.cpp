// The attention kernel's context-parallel entry points (kernels/cpu/attention.h): per-row key
// ranges given outright mean exactly the mask they describe, and attention over keys split into
// blocks, merged by log-sum-exp (attention_merge), is attention over all keys, with rows a block
// hides kept out of the merge.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "loom/core/rng.h"
#include "loom/kernels/cpu/attention.h"
#include "attention_test_util.h"

using namespace loom;
namespace kc = loom::kernels::cpu;
using loom::testing::ranges_of;

namespace {

Tensor random(const Shape& shape, DType dtype, uint64_t seed) {
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 2.0 * stream_uniform({seed, 9, 0}, static_cast<int64_t>(i)) - 1.0;
  return Tensor::from_vector(v, shape, DType::f64).to(dtype);
}

void expect_same(const Tensor& a, const Tensor& b, const char* what) {
  EXPECT_EQ(a.contiguous().to_double_vector(), b.contiguous().to_double_vector()) << what;
}

void expect_near(const Tensor& a, const Tensor& b, double tol, const char* what) {
  const auto x = a.contiguous().to_double_vector(), y = b.contiguous().to_double_vector();
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isinf(y[i])) {
      EXPECT_EQ(x[i], y[i]) << what << " [" << i << "]";
      continue;
    }
    ASSERT_NEAR(x[i], y[i], tol * (1 + std::fabs(y[i]))) << what << " [" << i << "]";
  }
}

}  // namespace

TEST(AttentionKernel, KeyRangesMeanExactlyTheMaskTheyDescribe) {
  const int64_t B = 2, Sq = 20, Sk = 29, H = 4, KV = 2, D = 8, Dv = 5, offset = 9;
  const std::vector<std::vector<int64_t>> ends{{7, 20, 29}, {12, 13, 25}};
  for (DType dtype : {DType::f64, DType::f32}) {
    const Tensor q = random({B, Sq, H, D}, dtype, 1), k = random({B, Sk, KV, D}, dtype, 2),
                 v = random({B, Sk, KV, Dv}, dtype, 3), dout = random({B, Sq, H, Dv}, dtype, 4);
    kernels::AttentionMask by_mode;
    by_mode.q_offset = offset;
    by_mode.doc_ends = Tensor::from_vector(std::vector<int64_t>{7, 20, 29, 12, 13, 25}, {2, 3});
    kernels::AttentionMask by_ranges;
    by_ranges.causal = false;  // not read: the ranges are the whole mask
    by_ranges.key_ranges = ranges_of(B, Sq, Sk, offset, ends);
    const kernels::AttentionTiles small{4, 8, 4, 8};
    const auto a = kc::attention_forward(q, k, v, 0.4, by_mode, true, small);
    const auto b = kc::attention_forward(q, k, v, 0.4, by_ranges, true, small);
    expect_same(b.out, a.out, "out");
    expect_same(b.lse, a.lse, "lse");
    expect_same(b.max_logits, a.max_logits, "max logits");
    const auto ga = kc::attention_backward(dout, q, k, v, a.out, a.lse, 0.4, by_mode, small);
    const auto gb = kc::attention_backward(dout, q, k, v, b.out, b.lse, 0.4, by_ranges, small);
    expect_same(gb.dq, ga.dq, "dq");
    expect_same(gb.dk, ga.dk, "dk");
    expect_same(gb.dv, ga.dv, "dv");
  }
}

TEST(AttentionKernel, BlocksMergedByLogSumExpEqualAllKeys) {
  // Keys in three blocks; a document mask hides whole blocks from some rows (lse = -inf there).
  const int64_t B = 2, S = 24, H = 2, D = 6, Dv = 4;
  const std::vector<std::vector<int64_t>> ends{{5, 17, 24}, {9, 10, 20}};
  const Tensor q = random({B, S, H, D}, DType::f64, 5), k = random({B, S, H, D}, DType::f64, 6),
               v = random({B, S, H, Dv}, DType::f64, 7);
  kernels::AttentionMask whole_mask;
  whole_mask.key_ranges = ranges_of(B, S, S, 0, ends);
  const auto whole = kc::attention_forward(q, k, v, 0.5, whole_mask, false);

  Tensor out = Tensor::zeros({B, S, H, Dv}, DType::f64);
  Tensor lse = Tensor::full({B, H, S}, -std::numeric_limits<double>::infinity(), DType::f64);
  const int64_t cuts[] = {0, 8, 16, 24};
  for (int blk = 0; blk < 3; ++blk) {
    const int64_t k0 = cuts[blk], n = cuts[blk + 1] - k0;
    // The whole-key ranges, clipped to this block and made block-relative.
    std::vector<int64_t> r = whole_mask.key_ranges.to_int_vector();
    for (size_t i = 0; i < r.size(); i += 2) {
      int64_t lo = std::clamp<int64_t>(r[i] - k0, 0, n), hi = std::clamp<int64_t>(r[i + 1] - k0, 0, n);
      if (hi <= lo) lo = hi = 0;
      r[i] = lo;
      r[i + 1] = hi;
    }
    kernels::AttentionMask m;
    m.key_ranges = Tensor::from_vector(r, {B, S, 2});
    const auto part = kc::attention_forward(q, k.narrow(1, k0, n), v.narrow(1, k0, n), 0.5, m, false);
    kc::attention_merge(out, lse, part.out, part.lse);
  }
  expect_near(out, whole.out, 1e-13, "merged out");
  expect_near(lse, whole.lse, 1e-13, "merged lse");
  // Sample 1's tokens 20..23 belong to no document: zeros and -inf, never NaN.
  const auto o = out.to_double_vector();
  for (int64_t i = 20; i < 24; ++i)
    for (int64_t x = 0; x < H * Dv; ++x) EXPECT_EQ(o[static_cast<size_t>((S + i) * H * Dv + x)], 0.0);
}

TEST(AttentionKernel, KeyRangesOutsideTheKeysAreErrors) {
  const Tensor q = random({1, 2, 1, 4}, DType::f32, 8), k = random({1, 3, 1, 4}, DType::f32, 9);
  kernels::AttentionMask m;
  m.key_ranges = Tensor::from_vector(std::vector<int64_t>{0, 3, 1, 4}, {1, 2, 2});
  EXPECT_THROW(kc::attention_forward(q, k, k, 0.5, m, false), ValueError);
  m.key_ranges = Tensor::from_vector(std::vector<int64_t>{0, 3}, {1, 1, 2});
  EXPECT_THROW(kc::attention_forward(q, k, k, 0.5, m, false), ShapeError);
}
